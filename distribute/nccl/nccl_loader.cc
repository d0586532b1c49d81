// The NCCL backend's side in libkiln (built when CUDA and NCCL are found): it loads
// libkiln_nccl.so (from libkiln's own directory, else the library path) only when a GPU is
// present, bootstraps the NCCL group by broadcasting its unique id over MPI, and hands back the
// plugin's communicator. Without a GPU, make_nccl_collective is kUnavailable saying so.
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "distribute/nccl/nccl_plugin.h"
#include "kiln/device.h"
#include "kiln/error.h"

namespace kiln::distribute {
namespace {

struct Plugin {
  nccl_plugin::GetUniqueIdFn get_unique_id = nullptr;
  nccl_plugin::MakeFn make = nullptr;
  nccl_plugin::MakeGroupFn make_group = nullptr;
  std::string error;  // why it did not load
};

std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&nccl_available), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

const Plugin& plugin() {
  static const Plugin loaded = [] {
    Plugin p;
    void* lib = dlopen((own_directory() + nccl_plugin::kLibrary).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen(nccl_plugin::kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = dlerror();
      p.error = why ? why : "dlopen failed";
      return p;
    }
    p.get_unique_id =
        reinterpret_cast<nccl_plugin::GetUniqueIdFn>(dlsym(lib, nccl_plugin::kGetUniqueId));
    p.make = reinterpret_cast<nccl_plugin::MakeFn>(dlsym(lib, nccl_plugin::kMake));
    p.make_group = reinterpret_cast<nccl_plugin::MakeGroupFn>(dlsym(lib, nccl_plugin::kMakeGroup));
    if (!p.get_unique_id || !p.make || !p.make_group)
      p.error = std::string(nccl_plugin::kLibrary) + " lacks its entry points";
    return p;
  }();
  return loaded;
}

// The plugin, once `gpus` GPUs are known to be present; else kUnavailable from `function`.
const Plugin& plugin_for(const std::string& function, int gpus) {
  const int found = cuda_device_count();
  if (found == 0) {
    throw Error(ErrorCode::kUnavailable,
                function +
                    ": no GPU (the CUDA driver is absent or reports no device; NCCL needs one GPU "
                    "per rank); use make_mpi_collective or make_in_process_group");
  }
  if (found < gpus) {
    throw Error(ErrorCode::kUnavailable, function + ": needs " + std::to_string(gpus) +
                                             " GPUs, this machine has " + std::to_string(found));
  }
  const Plugin& p = plugin();
  if (!p.error.empty()) {
    throw Error(ErrorCode::kUnavailable, function + ": could not load the NCCL backend (" +
                                             nccl_plugin::kLibrary + "): " + p.error);
  }
  return p;
}

}  // namespace

bool nccl_available() { return cuda_device_count() > 0 && plugin().error.empty(); }

std::unique_ptr<Collective> make_nccl_collective(const CollectiveOptions& options) {
  const Plugin& p = plugin_for("make_nccl_collective", 1);
  // The NCCL group's id travels from rank 0 over MPI, which then carries each call's exchange.
  std::unique_ptr<Collective> control = make_mpi_collective(options);
  nccl_plugin::UniqueId id{};
  if (control->rank() == 0) p.get_unique_id(&id);
  Tensor bytes = Tensor::empty(DType::u8, {static_cast<int64_t>(sizeof id.bytes)});
  std::memcpy(bytes.raw_mutable_data(), id.bytes, sizeof id.bytes);
  bytes = control->broadcast(bytes, 0);
  std::memcpy(id.bytes, bytes.raw_data(), sizeof id.bytes);
  const int rank = control->rank(), size = control->size(), local = control->local_rank();
  return std::unique_ptr<Collective>(p.make(id, rank, size, local, &control, options));
}

std::vector<std::unique_ptr<Collective>> make_nccl_group(int size,
                                                         const CollectiveOptions& options) {
  if (size < 1) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "make_nccl_group: the group needs at least one replica, got " + std::to_string(size));
  }
  const Plugin& p = plugin_for("make_nccl_group", size);
  std::vector<std::unique_ptr<Collective>> controls = make_in_process_group(size, options);
  std::vector<std::unique_ptr<Collective>> group;
  p.make_group(&controls, options, &group);
  return group;
}

}  // namespace kiln::distribute

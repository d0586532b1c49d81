// libkiln_cuda.so through dlopen (plugin_loader.h).
#include "runtime/cuda/plugin_loader.h"

#include <dlfcn.h>

#include "kiln/error.h"
#include "runtime/cuda/driver.h"

namespace kiln::runtime::cuda {
namespace {

struct Loaded {
  const plugin::Api* api = nullptr;
  std::string error;
};

Loaded load() {
  Loaded l;
  // Beside libkiln first; its error is the one to report (a missing cuBLASLt, say), unless
  // the library path has the plugin.
  void* lib = dlopen(cuda_plugin_path().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    l.error = why ? why : "dlopen failed";
    lib = dlopen(plugin::kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return l;
    l.error.clear();
  }
  auto entry = reinterpret_cast<plugin::EntryFn>(dlsym(lib, plugin::kEntry));
  if (!entry) {
    l.error = std::string(plugin::kLibrary) + " has no " + plugin::kEntry;
    return l;
  }
  const plugin::Api* api = entry();
  if (!api || api->abi_version != plugin::kAbiVersion) {
    l.error = std::string(plugin::kLibrary) + " has ABI version " +
              std::to_string(api ? api->abi_version : -1) + ", libkiln expects " +
              std::to_string(plugin::kAbiVersion);
    return l;
  }
  l.api = api;
  return l;
}

}  // namespace

std::string cuda_plugin_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuda_plugin_path), &info) == 0 || !info.dli_fname)
    return plugin::kLibrary;
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + plugin::kLibrary;
}

const plugin::Api& cuda_plugin(const std::string& function) {
  std::string why;
  if (driver(&why) == nullptr) throw Error(ErrorCode::kUnavailable, function + ": " + why);
  static const Loaded loaded = load();
  if (!loaded.api)
    throw Error(ErrorCode::kUnavailable, function + ": could not load the CUDA libraries' "
                                                    "backend (" + std::string(plugin::kLibrary) +
                                                    "): " + loaded.error);
  return *loaded.api;
}

}  // namespace kiln::runtime::cuda

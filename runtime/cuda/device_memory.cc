// The CUDA device's BFC allocator and kiln/device.h's memory functions (device_memory.h).
#include "runtime/cuda/device_memory.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>

#include "kiln/device.h"
#include "kiln/error.h"
#include "runtime/cuda/driver.h"

namespace kiln {
namespace runtime::cuda {
namespace {

class DriverRegions final : public RegionAllocator {
 public:
  explicit DriverRegions(const Driver& d) : d_(d) {}
  void* alloc(size_t bytes) override {
    CUdeviceptr p = 0;
    if (d_.cuMemAlloc(&p, bytes) != 0) return nullptr;  // out of device memory
    return reinterpret_cast<void*>(p);
  }
  void free(void* ptr, size_t) override { d_.cuMemFree(reinterpret_cast<CUdeviceptr>(ptr)); }

 private:
  const Driver& d_;
};

struct State {
  std::mutex mu;
  std::optional<size_t> limit;  // set_memory_limit
  std::optional<bool> growth;   // set_memory_growth
  std::unique_ptr<BfcAllocator> allocator;
};

State& state() {
  static State* s = new State;  // never destroyed: device buffers may be freed at exit
  return *s;
}

// The device's index, checked: kInvalidArgument for the CPU or a GPU this machine lacks.
void check_device(const Device& device, const char* function) {
  if (device.type != DeviceType::kCuda)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(function) + ": " + device.str() +
                    " has no device allocator (host memory is the system's)");
  const int n = device_count();
  if (n > 0 && (device.index < 0 || device.index >= n))
    throw Error(ErrorCode::kInvalidArgument, std::string(function) + ": " + device.str() +
                                                 ": this machine has " + std::to_string(n) +
                                                 " GPU" + (n == 1 ? "" : "s"));
  if (device.index != 0)
    throw Error(ErrorCode::kUnimplemented,
                std::string(function) + ": " + device.str() + ": only cuda:0 is used so far");
}

// Sets one of the allocator's options: before the device's first allocation only.
template <class F>
void set_option(const Device& device, const char* function, F set) {
  check_device(device, function);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.allocator)
    throw Error(ErrorCode::kFailedPrecondition,
                std::string(function) + ": " + device.str() +
                    " has allocated already; set memory options before its first allocation");
  set(s);
}

}  // namespace

BfcAllocator& device_allocator() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.allocator) return *s.allocator;
  std::string why;
  const Driver* d = driver(&why);
  if (d == nullptr) throw Error(ErrorCode::kUnavailable, "cuda:0 memory: " + why);
  BfcOptions o;
  o.name = "cuda:0";
  if (s.limit) {
    o.limit = *s.limit;
  } else if (const char* env = std::getenv("KILN_GPU_MEMORY_LIMIT"); env && *env) {
    o.limit = parse_memory_size(env, "KILN_GPU_MEMORY_LIMIT");
  } else {
    // The memory free now, less a reserve for what is allocated outside the allocator (the
    // driver's modules, cuBLASLt's workspace and handles): 5% of the device, at least 512 MiB.
    size_t free = 0, total = 0;
    check(*d, d->cuMemGetInfo(&free, &total), "cuda:0 memory: cuMemGetInfo");
    const size_t reserve = std::max<size_t>(total / 20, size_t{512} << 20);
    if (free <= reserve)
      throw Error(ErrorCode::kResourceExhausted,
                  "cuda:0 memory: " + std::to_string(free) + " bytes free, not above the " +
                      std::to_string(reserve) + " kept for the driver and libraries");
    o.limit = free - reserve;
  }
  if (s.growth) {
    o.allow_growth = *s.growth;
  } else if (const char* env = std::getenv("KILN_GPU_ALLOW_GROWTH"); env && *env) {
    o.allow_growth = std::string(env) != "false" && std::string(env) != "0";
  }
  s.allocator = std::make_unique<BfcAllocator>(std::make_unique<DriverRegions>(*d), o);
  return *s.allocator;
}

}  // namespace runtime::cuda

std::string MemoryStats::str() const {
  std::ostringstream os;
  os << "in use " << bytes_in_use << " B (peak " << peak_bytes_in_use << "), reserved "
     << bytes_reserved << " of " << bytes_limit << " B, largest free block "
     << largest_free_block << " B, fragmentation " << fragmentation << ", " << num_allocs
     << " allocations";
  return os.str();
}

MemoryStats memory_stats(const Device& device) {
  runtime::cuda::check_device(device, "memory_stats");
  runtime::BfcStats b = runtime::cuda::device_allocator().stats();
  MemoryStats m;
  m.bytes_in_use = b.bytes_in_use;
  m.peak_bytes_in_use = b.peak_bytes_in_use;
  m.bytes_reserved = b.bytes_reserved;
  m.bytes_limit = b.bytes_limit;
  m.largest_free_block = b.largest_free_block;
  m.num_allocs = b.num_allocs;
  m.fragmentation = b.fragmentation;
  return m;
}

void set_memory_growth(const Device& device, bool enable) {
  runtime::cuda::set_option(device, "set_memory_growth",
                            [&](runtime::cuda::State& s) { s.growth = enable; });
}

void set_memory_limit(const Device& device, size_t bytes) {
  if (bytes == 0)
    throw Error(ErrorCode::kInvalidArgument, "set_memory_limit: " + device.str() +
                                                 ": a limit of 0 bytes");
  runtime::cuda::set_option(device, "set_memory_limit",
                            [&](runtime::cuda::State& s) { s.limit = bytes; });
}

}  // namespace kiln

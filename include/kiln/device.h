// Where a tensor's bytes live. Kiln runs on the CPU today; CUDA devices are detected at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCuda, index}; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu:0", "cuda:1"
};

// A device allocator's figures (TensorFlow's tf.config.experimental.get_memory_info, with more).
struct MemoryStats {
  size_t bytes_in_use = 0;       // live allocations, each rounded up to 256 bytes
  size_t peak_bytes_in_use = 0;
  size_t bytes_reserved = 0;     // taken from the device
  size_t bytes_limit = 0;
  size_t largest_free_block = 0;
  int64_t num_allocs = 0;
  double fragmentation = 0;      // 1 - largest free block / free bytes
  std::string str() const;
};

// The allocator of `device` (a CUDA device; Kiln's host memory has none). Throws kiln::Error:
// kInvalidArgument for the CPU or a device index this machine lacks (when it has GPUs),
// kUnimplemented for GPUs other than cuda:0 (the only one used so far), kUnavailable without a
// GPU (saying why).
MemoryStats memory_stats(const Device& device);

// A GPU's memory options, as TensorFlow's: set before the device's first allocation (after it,
// kFailedPrecondition). Growth (the default) takes memory as it is needed, in regions doubling
// in size; without it the whole limit is taken at the first allocation. The limit is the most
// bytes taken from the device; by default KILN_GPU_MEMORY_LIMIT ("8G", "512M", ...) or else the
// memory free when the allocator is created, less a reserve for the driver and the CUDA
// libraries (5% of the device, at least 512 MiB). A request beyond the limit throws kiln::Error
// (kResourceExhausted) naming the request, the limit and the bytes in use. Without a GPU these
// only check their arguments (a zero limit, the CPU: kInvalidArgument).
void set_memory_growth(const Device& device, bool enable);
void set_memory_limit(const Device& device, size_t bytes);

// Number of CUDA devices usable by this process: 0 when Kiln was built without CUDA, when
// no driver is installed, or when no GPU is present. Never throws.
int cuda_device_count();

}  // namespace kiln

// Where a tensor's bytes live. Kiln runs on the CPU today; CUDA devices are detected at run time.
#pragma once

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

// Number of CUDA devices usable by this process: 0 when Kiln was built without CUDA, when
// no driver is installed, or when no GPU is present. Never throws.
int cuda_device_count();

}  // namespace kiln

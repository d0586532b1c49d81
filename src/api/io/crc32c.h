// CRC-32C (Castagnoli), the checksum of TFRecord framing, and the mask TFRecord applies to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln::io::crc32c {

// The CRC-32C of `data` appended to data whose CRC-32C is `crc` (0 for no data).
uint32_t extend(uint32_t crc, const void* data, size_t n);

inline uint32_t value(const void* data, size_t n) { return extend(0, data, n); }
inline uint32_t value(std::string_view data) { return extend(0, data.data(), data.size()); }

// A CRC stored next to the data it covers is masked, so that the CRC of data that itself
// contains CRCs stays well distributed: rotate right by 15 bits, add a constant.
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;
inline uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }
inline uint32_t unmask(uint32_t masked) {
  const uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace kiln::io::crc32c

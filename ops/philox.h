// Philox-4x32-10, the counter-based generator of Salmon et al., "Parallel Random Numbers: As
// Easy as 1, 2, 3" (SC'11): 4 random words from a 128-bit counter and a 64-bit key.
#pragma once

#include <array>
#include <cstdint>

namespace kiln::ops {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    uint64_t p0 = uint64_t{kM0} * ctr[0];
    uint64_t p1 = uint64_t{kM1} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

}  // namespace kiln::ops

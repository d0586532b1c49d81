// CRC-32C: published check values, the TFRecord mask, and agreement with a bit-by-bit reference
// over many lengths, alignments and split points.
#include "src/api/io/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::io {
namespace {

// CRC-32C bit by bit: reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF.
uint32_t reference_crc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
  }
  return ~c;
}

// n bytes of a linear congruential generator's high bits.
std::vector<uint8_t> pseudo_random_bytes(size_t n, uint32_t state) {
  std::vector<uint8_t> data(n);
  for (uint8_t& b : data) {
    state = state * 1103515245u + 12345u;
    b = static_cast<uint8_t>(state >> 16);
  }
  return data;
}

TEST(Crc32c, CheckValueOf123456789) { EXPECT_EQ(crc32c::value("123456789"), 0xe3069283u); }

TEST(Crc32c, Rfc3720TestVectors) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c::value(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(crc32c::value(ones.data(), ones.size()), 0x62a8ab43u);
  EXPECT_EQ(crc32c::value(ascending.data(), ascending.size()), 0x46dd794eu);
}

TEST(Crc32c, EmptyDataIsZero) { EXPECT_EQ(crc32c::value("", 0), 0u); }

TEST(Crc32c, MaskRotatesRightFifteenAndAddsTheDelta) {
  // ((c >> 15) | (c << 17)) + 0xa282ead8, by hand for c = 1 and c = 0x8000.
  EXPECT_EQ(crc32c::mask(0), 0xa282ead8u);
  EXPECT_EQ(crc32c::mask(1), (1u << 17) + 0xa282ead8u);
  EXPECT_EQ(crc32c::mask(0x8000), 1u + 0xa282ead8u);
  for (uint32_t c : {0u, 1u, 0xe3069283u, 0xffffffffu, 0x12345678u}) {
    EXPECT_EQ(crc32c::unmask(crc32c::mask(c)), c);
  }
}

TEST(Crc32c, MaskedCrcsOfAKnownRecord) {
  // The record "hello": its 8-byte little-endian length 5, and its data (values computed
  // with an independent bitwise implementation).
  const uint8_t length[8] = {5, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(crc32c::value(length, 8), 0xe4094dc0u);
  EXPECT_EQ(crc32c::mask(crc32c::value(length, 8)), 0x3e04b2eau);
  EXPECT_EQ(crc32c::value("hello"), 0x9a71bb4cu);
  EXPECT_EQ(crc32c::mask(crc32c::value("hello")), 0x191c1fbbu);
  // The empty record: length 0.
  const uint8_t zero[8] = {};
  EXPECT_EQ(crc32c::mask(crc32c::value(zero, 8)), 0x07980329u);
}

TEST(Crc32c, MatchesBitwiseReferenceAtEveryLengthAndAlignment) {
  const std::vector<uint8_t> data = pseudo_random_bytes(300, 12345);
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n = 0; start + n <= data.size(); n += (n < 40 ? 1 : 37)) {
      ASSERT_EQ(crc32c::value(data.data() + start, n), reference_crc32c(data.data() + start, n))
          << "start " << start << " length " << n;
    }
  }
}

// Lengths around multiples of the three 256-byte blocks that long data runs as, at every
// alignment, from a fresh and from a running CRC.
TEST(Crc32c, MatchesBitwiseReferenceForLongData) {
  const std::vector<uint8_t> data = pseudo_random_bytes(4000, 777);
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n : {767, 768, 769, 775, 776, 808, 1535, 1536, 1543, 2304, 3000, 3990}) {
      ASSERT_EQ(crc32c::value(data.data() + start, n), reference_crc32c(data.data() + start, n))
          << "start " << start << " length " << n;
      const size_t split = n / 3 + start;
      ASSERT_EQ(crc32c::extend(crc32c::value(data.data(), split), data.data() + split, n - split),
                reference_crc32c(data.data(), n))
          << "split " << split << " length " << n;
    }
  }
}

TEST(Crc32c, ExtendEqualsOneShot) {
  const std::string s = "The quick brown fox jumps over the lazy dog, twice over and again.";
  const uint32_t whole = crc32c::value(s);
  for (size_t split = 0; split <= s.size(); ++split) {
    EXPECT_EQ(crc32c::extend(crc32c::value(s.data(), split), s.data() + split, s.size() - split),
              whole);
  }
}

}  // namespace
}  // namespace kiln::io

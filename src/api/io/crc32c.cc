// CRC-32C: the SSE4.2 crc32 instruction where the compiler targets it, else slicing-by-8 over
// tables built at first use from the reflected polynomial 0x82F63B78. With the instruction,
// data of at least 3 blocks runs as three independent streams, one block each, whose CRCs are
// then combined: the instruction takes 3 cycles to give its result but can start one every
// cycle, so one stream leaves two thirds of it idle (a TFRecord of a Fashion-MNIST image is
// about three blocks).
#include "src/api/io/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace kiln::io::crc32c {
namespace {

#if !defined(__SSE4_2__)
constexpr uint32_t kPolynomial = 0x82f63b78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// tables[k][b]: the CRC of byte b followed by k zero bytes.
Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPolynomial & (0u - (c & 1u)));
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}
#endif

#if defined(__SSE4_2__)
constexpr size_t kBlock = 256;  // bytes per stream

uint64_t load64(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return word;
}

// The crc32 instruction's register after kBlock more zero bytes, as a function of the
// register before: linear over GF(2), so one table of 256 entries per byte of it.
struct Shift {
  std::array<std::array<uint32_t, 256>, 4> table{};
  Shift() {
    for (int byte = 0; byte < 4; ++byte) {
      for (uint32_t v = 0; v < 256; ++v) {
        uint64_t r = v << (8 * byte);
        for (size_t i = 0; i < kBlock; i += 8) r = _mm_crc32_u64(r, 0);
        table[byte][v] = static_cast<uint32_t>(r);
      }
    }
  }
  uint32_t operator()(uint32_t r) const {
    return table[0][r & 0xff] ^ table[1][(r >> 8) & 0xff] ^ table[2][(r >> 16) & 0xff] ^
           table[3][r >> 24];
  }
};
#endif

}  // namespace

uint32_t extend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
#if defined(__SSE4_2__)
  uint64_t c64 = c;
  if (n >= 3 * kBlock) {
    static const Shift shift;
    for (; n >= 3 * kBlock; n -= 3 * kBlock, p += 3 * kBlock) {
      // Blocks a, b, c: a continues the register, b and c start from zero; then
      // register(a b c) = shift(shift(a) ^ b) ^ c, the instruction being linear.
      uint64_t a = c64, b = 0, d = 0;
      for (size_t i = 0; i < kBlock; i += 8) {
        a = _mm_crc32_u64(a, load64(p + i));
        b = _mm_crc32_u64(b, load64(p + kBlock + i));
        d = _mm_crc32_u64(d, load64(p + 2 * kBlock + i));
      }
      c64 = shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
            static_cast<uint32_t>(d);
    }
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = _mm_crc32_u64(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
#else
  static const Tables t = make_tables();
  for (; n >= 8; n -= 8, p += 8) {
    // Little-endian words: byte 0 is the lowest.
    const uint32_t lo =
        c ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
        t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xff];
#endif
  return ~c;
}

}  // namespace kiln::io::crc32c

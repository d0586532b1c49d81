// Protocol-buffer wire format written by hand, for tests that check our readers and writers
// against bytes built independently of them (and of protobuf).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::io::wire {

inline std::string varint(uint64_t v) {
  std::string out;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    out.push_back(static_cast<char>(v ? b | 0x80 : b));
  } while (v);
  return out;
}
inline std::string tag(int field, int wire_type) {
  return varint(static_cast<uint64_t>(field) << 3 | wire_type);
}
// A length-delimited field (wire type 2).
inline std::string len_field(int field, const std::string& body) {
  return tag(field, 2) + varint(body.size()) + body;
}
// A float's 4 little-endian bytes (wire type 5's payload).
inline std::string fixed32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(u >> (8 * i)));
  return out;
}
inline std::string packed_floats(const std::vector<float>& values) {
  std::string packed;
  for (float v : values) packed += fixed32(v);
  return packed;
}
inline std::string packed_ints(const std::vector<int64_t>& values) {
  std::string packed;
  for (int64_t v : values) packed += varint(static_cast<uint64_t>(v));
  return packed;
}

// Calls check(bytes) on every proper prefix of `good` and on every copy of it with one bit
// flipped: the damaged inputs a reader must refuse cleanly (or read as something valid).
template <class F>
void for_each_damaged(const std::string& good, F&& check) {
  for (size_t n = 0; n < good.size(); ++n) check(good.substr(0, n));
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = good;
      damaged[i] ^= static_cast<char>(1 << bit);
      check(damaged);
    }
  }
}

}  // namespace kiln::io::wire

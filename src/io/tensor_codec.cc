// Kiln dtypes <-> proto enum values, and overflow-checked tensor sizes for file readers.
#include "src/io/tensor_codec.h"

#include <cstdio>

namespace kiln::io::internal {

proto::KilnDType to_proto(DType dtype) {
  switch (dtype) {
    case f32:
      return proto::KILN_F32;
    case f64:
      return proto::KILN_F64;
    case f16:
      return proto::KILN_F16;
    case bf16:
      return proto::KILN_BF16;
    case i8:
      return proto::KILN_I8;
    case u8:
      return proto::KILN_U8;
    case i32:
      return proto::KILN_I32;
    case i64:
      return proto::KILN_I64;
    case bool_:
      return proto::KILN_BOOL;
  }
  return proto::KILN_DTYPE_INVALID;
}

std::optional<DType> from_proto(int dtype) {
  switch (dtype) {
    case proto::KILN_F32:
      return f32;
    case proto::KILN_F64:
      return f64;
    case proto::KILN_F16:
      return f16;
    case proto::KILN_BF16:
      return bf16;
    case proto::KILN_I8:
      return i8;
    case proto::KILN_U8:
      return u8;
    case proto::KILN_I32:
      return i32;
    case proto::KILN_I64:
      return i64;
    case proto::KILN_BOOL:
      return bool_;
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> checked_nbytes(DType dtype, const Shape& shape) {
  constexpr uint64_t kLimit = uint64_t{1} << 62;
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > kLimit / static_cast<uint64_t>(d)) return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

bool valid_bools(const void* data, uint64_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] > 1) return false;
  return true;
}

std::string hex32(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}

}  // namespace kiln::io::internal

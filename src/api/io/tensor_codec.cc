// Kiln dtypes <-> proto enum values, and overflow-checked tensor sizes for file readers.
#include "src/api/io/tensor_codec.h"

#include <cstdio>
#include <utility>

namespace kiln::io::internal {

namespace {

constexpr std::pair<DType, proto::KilnDType> kDTypes[] = {
    {f32, proto::KILN_F32},   {f64, proto::KILN_F64}, {f16, proto::KILN_F16},
    {bf16, proto::KILN_BF16}, {i8, proto::KILN_I8},   {u8, proto::KILN_U8},
    {i32, proto::KILN_I32},   {i64, proto::KILN_I64}, {bool_, proto::KILN_BOOL}};

}  // namespace

proto::KilnDType to_proto(DType dtype) {
  for (const auto& [d, p] : kDTypes)
    if (d == dtype) return p;
  return proto::KILN_DTYPE_INVALID;
}

std::optional<DType> from_proto(int dtype) {
  for (const auto& [d, p] : kDTypes)
    if (p == dtype) return d;
  return std::nullopt;
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

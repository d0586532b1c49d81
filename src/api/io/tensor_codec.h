// Shared by checkpoints and saved models: Kiln dtypes in protos, and sizes from untrusted
// files computed with overflow checks before anything is allocated from them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/dtype.h"
#include "kiln/shape.h"
#include "src/api/io/proto/checkpoint.pb.h"

namespace kiln::io::internal {

proto::KilnDType to_proto(DType dtype);
// nullopt for an invalid or unknown value.
std::optional<DType> from_proto(int dtype);

// The byte size of a tensor of `dtype` and `shape` as read from a file: nullopt if a
// dimension is negative or the size overflows 2^62.
std::optional<uint64_t> checked_nbytes(DType dtype, const Shape& shape);

// True if every byte of a bool tensor's data is 0 or 1 (other bytes are not valid bools).
bool valid_bools(const void* data, uint64_t n);

std::string hex32(uint32_t v);  // "0x1234abcd"

}  // namespace kiln::io::internal

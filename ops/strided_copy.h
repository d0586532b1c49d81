// Copies elements between strided layouts: the one loop behind every layout kernel
// (transpose, slice, broadcast, reverse, concatenate, pad).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/shape.h"

namespace kiln::ops {

// out[out_offset + sum_d i_d * out_strides[d]] = in[in_offset + sum_d i_d * in_strides[d]]
// for every index i of `dims`. Strides are in elements; an input stride may be 0 (broadcast)
// or negative (reverse). Every layout kernel is one of these.
struct StridedCopy {
  Shape dims;
  std::vector<int64_t> in_strides;
  std::vector<int64_t> out_strides;
  int64_t in_offset = 0;
  int64_t out_offset = 0;
};

// Runs the copy (on the thread pool when large). elem_size is 1, 2, 4 or 8 bytes.
void strided_copy(const StridedCopy& copy, size_t elem_size, const void* in, void* out);

// True when the copy reads all in_size input elements in order into a contiguous output, so
// the output could share the input's storage instead.
bool is_identity(const StridedCopy& copy, int64_t in_size);

// Sets n elements of elem_size bytes to *value.
void fill(void* out, int64_t n, size_t elem_size, const void* value);

}  // namespace kiln::ops

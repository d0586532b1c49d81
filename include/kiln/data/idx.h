// IDX files (the format of MNIST and Fashion-MNIST): read raw or gzip-compressed files into
// tensors, and write tensors as IDX files.
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln::data {

// Reads an IDX file, raw or gzip-compressed (detected by its magic bytes). The tensor has the
// file's shape and element type: u8, i8, i32, f32, f64; 16-bit integers widen to i32.
// Throws kiln::Error: kNotFound when the file cannot be opened, kDataLoss when it is not a
// valid IDX file (bad magic, truncated, trailing bytes, corrupt gzip stream); the message
// names the file and the byte offset. A corrupt header never makes it allocate more memory
// than the file's data can fill.
Tensor read_idx(const std::string& path);

// Writes `t` (u8, i8, i32, f32 or f64; rank 1 to 8) as an IDX file, gzip-compressed if `gzip`.
// Atomic: the data goes to a temporary file in the same directory, which is synced and then
// renamed over `path`, so readers see the old file or the new one, never a partial one.
void write_idx(const std::string& path, const Tensor& t, bool gzip);

}  // namespace kiln::data

// What the files of libkiln_cuda.so (runtime/cuda/cuda_plugin.h) share: cuda_plugin.cc's
// cuBLASLt side and cudnn_ops.cc's convolutions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_plugin.h"

namespace kiln::runtime::cuda::plugin_impl {

// Writes `why` into err (as the Api's functions report) and returns 1.
int fail(char* err, size_t len, const std::string& why);

// dst [cols, rows] = the transpose of src [rows, cols], both row-major of plugin::DType `dtype`,
// on `stream` (cuBLASLt's matrix transform). Returns "" or why it failed.
std::string transpose(int dtype, int64_t rows, int64_t cols, const void* src, void* dst,
                      void* stream);

// The Api's convolution and pooling entries (cudnn_ops.cc).
int conv_workspace(const plugin::Conv* args, size_t* bytes, char* err, size_t len);
int conv(const plugin::Conv* args, char* err, size_t len);
int pool(const plugin::Pool* args, char* err, size_t len);
int64_t conv_algorithms_chosen();

}  // namespace kiln::runtime::cuda::plugin_impl

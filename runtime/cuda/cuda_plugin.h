// The C ABI of libkiln_cuda.so, the CUDA libraries' side of the CUDA backend (cuBLASLt and
// cuDNN; it links cudart, cuBLASLt and cuDNN, which libkiln must not load on machines without a
// GPU):
// runtime/cuda/plugin_loader.cc dlopens it only when a GPU is present and calls kEntry for this
// table. Plain C types only, so that the two sides need not share a C++ ABI beyond this header.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::runtime::cuda::plugin {

inline constexpr const char* kLibrary = "libkiln_cuda.so";
inline constexpr const char* kEntry = "kiln_cuda_plugin";
inline constexpr int kAbiVersion = 2;

enum DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
enum Activation : int { kNone = 0, kRelu = 1 };

// Row-major C[m, n] = act(op(A) op(B) + bias[n]) on device pointers, A [m, k] ([k, m] when
// trans_a), B [k, n] ([n, k] when trans_b), bias of C's dtype or null; all of `dtype`, summed
// in f32 (no TF32 for f32). With batch > 1, `batch` such products one after another in A, B
// and C (the same bias for each). On `stream` (a cudaStream_t; null: the default stream).
struct Matmul {
  int dtype = kF32;
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  int trans_a = 0, trans_b = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;
  void* c = nullptr;
  int activation = kNone;
  void* stream = nullptr;
};

enum ConvPass : int { kConvForward = 0, kConvInputGrad = 1, kConvKernelGrad = 2 };

// A 2-d cross-correlation over NHWC values: x [n, h, w, c], the kernel in Kiln's HWIO layout
// [r, s, c / groups, k], y [n, oh, ow, k]; each spatial axis padded by pad_* on both sides, all
// of `dtype`, summed in f32 (no TF32 for f32). The forward pass reads x, w and writes y; the
// input gradient reads y (dy), w and writes x (dx); the kernel gradient reads x, y (dy) and
// writes w (dw). `workspace` holds conv_workspace()'s bytes. On `stream`, as Matmul.
struct Conv {
  int dtype = kF32;
  int pass = kConvForward;
  int64_t n = 0, h = 0, w = 0, c = 0, k = 0, r = 0, s = 0, oh = 0, ow = 0;
  int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  void* x = nullptr;
  void* w_ptr = nullptr;
  void* y = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* stream = nullptr;
};

enum PoolKind : int { kPoolMax = 0, kPoolSum = 1, kPoolMaxGrad = 2, kPoolSumGrad = 3 };

// Pooling over NHWC values x [n, h, w, c] into y [n, oh, ow, c], windows win_h x win_w at
// strides stride_*, each spatial axis padded by pad_* on both sides (a maximum ignores the
// padding, a sum counts it as 0). kPoolMax and kPoolSum read x and write y; kPoolMaxGrad reads x
// and dy and writes dx, using `workspace` (y's bytes) for the pooled x; kPoolSumGrad reads dy
// and writes dx, with `workspace` of x's bytes. On `stream`, as Matmul.
struct Pool {
  int dtype = kF32;
  int kind = kPoolMax;
  int64_t n = 0, h = 0, w = 0, c = 0, oh = 0, ow = 0;
  int64_t win_h = 0, win_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  const void* x = nullptr;
  void* y = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* stream = nullptr;
};

struct Api {
  int abi_version = 0;
  // Each returns 0, or writes why (NUL-terminated, at most err_len bytes) and returns nonzero.
  int (*matmul)(const Matmul* args, char* err, size_t err_len) = nullptr;
  // Waits for the device (cudaDeviceSynchronize).
  int (*synchronize)(char* err, size_t err_len) = nullptr;
  // How many algorithm choices were made (one per matmul shape, dtype and epilogue, and one per
  // convolution geometry, dtype and pass).
  int64_t (*algorithms_chosen)() = nullptr;
  // The convolution's algorithm, chosen once per geometry by cuDNN's heuristic, and the scratch
  // bytes it needs (cuDNN's and the kernel's KRSC copy) in *bytes; null where the plugin was
  // built without cuDNN.
  int (*conv_workspace)(const Conv* args, size_t* bytes, char* err, size_t err_len) = nullptr;
  int (*conv)(const Conv* args, char* err, size_t err_len) = nullptr;
  // cuDNN's pooling (null without cuDNN, as conv).
  int (*pool)(const Pool* args, char* err, size_t err_len) = nullptr;
};

using EntryFn = const Api* (*)();

}  // namespace kiln::runtime::cuda::plugin

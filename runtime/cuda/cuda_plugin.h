// The C ABI of libkiln_cuda.so, the CUDA libraries' side of the CUDA backend (cuBLASLt; it
// links cudart and cuBLASLt, which libkiln must not load on machines without a GPU):
// runtime/cuda/plugin_loader.cc dlopens it only when a GPU is present and calls kEntry for this
// table. Plain C types only, so that the two sides need not share a C++ ABI beyond this header.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::runtime::cuda::plugin {

inline constexpr const char* kLibrary = "libkiln_cuda.so";
inline constexpr const char* kEntry = "kiln_cuda_plugin";
inline constexpr int kAbiVersion = 1;

enum DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
enum Activation : int { kNone = 0, kRelu = 1 };

// Row-major C[m, n] = act(op(A) op(B) + bias[n]) on device pointers, A [m, k] ([k, m] when
// trans_a), B [k, n] ([n, k] when trans_b), bias of C's dtype or null; all of `dtype`, summed
// in f32 (no TF32 for f32). On `stream` (a cudaStream_t; null: the default stream).
struct Matmul {
  int dtype = kF32;
  int64_t m = 0, n = 0, k = 0;
  int trans_a = 0, trans_b = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;
  void* c = nullptr;
  int activation = kNone;
  void* stream = nullptr;
};

struct Api {
  int abi_version = 0;
  // Each returns 0, or writes why (NUL-terminated, at most err_len bytes) and returns nonzero.
  int (*matmul)(const Matmul* args, char* err, size_t err_len) = nullptr;
  // Waits for the device (cudaDeviceSynchronize).
  int (*synchronize)(char* err, size_t err_len) = nullptr;
  // How many matmul algorithm choices were made (one per shape, dtype and epilogue).
  int64_t (*algorithms_chosen)() = nullptr;
};

using EntryFn = const Api* (*)();

}  // namespace kiln::runtime::cuda::plugin

// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1), so that libkiln starts on
// machines without a driver or a GPU and builds without the CUDA toolkit: the few entry points
// Kiln calls, declared here with the driver's ABI (cuda.h's types and the _v2 symbols).
// Internal to the runtime and the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::runtime::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;  // NOLINT: the driver's type

// cuModuleLoadDataEx's options (cuda.h's CUjit_option values).
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSizeBytes = 6;

struct Driver {
  CUresult (*cuInit)(unsigned int flags) = nullptr;
  CUresult (*cuDeviceGetCount)(int* count) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice device) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext ctx) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadDataEx)(CUmodule* module, const void* image, unsigned int num_options,
                                 int* options, void** option_values) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule module) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule module, const char* name) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction fn, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                             void** params, void** extra) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes) = nullptr;         // cuMemAlloc_v2
  CUresult (*cuMemFree)(CUdeviceptr ptr) = nullptr;                          // cuMemFree_v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes) = nullptr;  // _v2
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes) = nullptr;        // _v2
  CUresult (*cuMemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src, size_t bytes) = nullptr;  // _v2
  CUresult (*cuMemGetInfo)(size_t* free, size_t* total) = nullptr;  // cuMemGetInfo_v2
  CUresult (*cuGetErrorString)(CUresult error, const char** text) = nullptr;
};

// The driver with device 0's primary context current on the calling thread, or nullptr when
// there is no driver or no GPU (`why` says which, when given). Loaded once per process.
const Driver* driver(std::string* why = nullptr);

// The GPUs the driver reports (0 without a driver or a GPU); creates no context.
int device_count();

// "text (code)" for a driver error: the driver's description and the CUresult.
std::string error_string(const Driver& d, CUresult r);

// Throws kiln::Error (kInternal) "<what>: <error_string>" unless r is 0 (CUDA_SUCCESS).
void check(const Driver& d, CUresult r, const std::string& what);

}  // namespace kiln::runtime::cuda

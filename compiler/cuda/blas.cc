// cuBLASLt on host tensors (blas.h).
#include "compiler/cuda/blas.h"

#include <chrono>
#include <string>

#include "compiler/cuda/device_buffers.h"
#include "kiln/graph.h"
#include "kiln/ops.h"
#include "runtime/cuda/plugin_loader.h"

namespace kiln::compiler::cuda {
namespace {

namespace plugin = runtime::cuda::plugin;

int dtype_code(DType t, const std::string& what) {
  switch (t) {
    case f32: return plugin::kF32;
    case f16: return plugin::kF16;
    case bf16: return plugin::kBF16;
    default:
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": dtype " + dtype_name(t) + " (the GPU's matmul takes f32, f16, bf16)");
  }
}

void call(const plugin::Api& api, const plugin::Matmul& m, const std::string& what) {
  char err[512] = {0};
  if (api.matmul(&m, err, sizeof err) != 0 || api.synchronize(err, sizeof err) != 0)
    throw Error(ErrorCode::kInternal, what + ": " + err);
}

}  // namespace

Tensor matmul_on_gpu(const Tensor& a, const Tensor& b, const Tensor& bias,
                     const GpuMatmulOptions& options) {
  const std::string what = "matmul_on_gpu";
  auto str = [](const Tensor& t) { return TensorType{t.dtype(), t.shape()}.str(); };
  if (!a.defined() || !b.defined() || a.shape().size() != 2 || b.shape().size() != 2)
    throw Error(ErrorCode::kInvalidArgument, what + ": a and b must be 2-d tensors");
  if (a.dtype() != b.dtype())
    throw Error(ErrorCode::kInvalidArgument,
                what + ": a is " + str(a) + ", b is " + str(b) + ": dtypes differ");
  const int code = dtype_code(a.dtype(), what);
  const int64_t m = options.trans_a ? a.shape()[1] : a.shape()[0];
  const int64_t k = options.trans_a ? a.shape()[0] : a.shape()[1];
  const int64_t kb = options.trans_b ? b.shape()[1] : b.shape()[0];
  const int64_t n = options.trans_b ? b.shape()[0] : b.shape()[1];
  if (k != kb)
    throw Error(ErrorCode::kInvalidArgument, what + ": a is " + str(a) + ", b is " + str(b) +
                                                 ": inner dimensions " + std::to_string(k) +
                                                 " and " + std::to_string(kb) + " differ");
  if (bias.defined() && (bias.dtype() != a.dtype() || bias.shape() != Shape{n}))
    throw Error(ErrorCode::kInvalidArgument, what + ": bias is " + str(bias) + ", expected " +
                                                 TensorType{a.dtype(), {n}}.str());
  const plugin::Api& api = runtime::cuda::cuda_plugin(what);
  const runtime::cuda::Driver& d = need_driver(what);
  if (k == 0) {  // an empty sum: act(bias), or zeros (cuBLASLt takes no k = 0)
    Tensor c = zeros({m, n}, f32);
    if (bias.defined()) c = add(c, bias.to(f32));
    if (options.relu) c = maximum(c, zeros({}, f32));
    return c.to(a.dtype());
  }
  DeviceBuffers buffers(d);
  Tensor c = Tensor::empty(a.dtype(), {m, n});
  plugin::Matmul args;
  args.dtype = code;
  args.m = m;
  args.n = n;
  args.k = k;
  args.trans_a = options.trans_a;
  args.trans_b = options.trans_b;
  args.activation = options.relu ? plugin::kRelu : plugin::kNone;
  runtime::cuda::CUdeviceptr da = buffers.copy_in(a, what + ": a");
  runtime::cuda::CUdeviceptr db = buffers.copy_in(b, what + ": b");
  runtime::cuda::CUdeviceptr dbias = bias.defined() ? buffers.copy_in(bias, what + ": bias") : 0;
  runtime::cuda::CUdeviceptr dc = buffers.alloc(c.nbytes(), what + ": c");
  args.a = reinterpret_cast<const void*>(da);
  args.b = reinterpret_cast<const void*>(db);
  args.bias = bias.defined() ? reinterpret_cast<const void*>(dbias) : nullptr;
  args.c = reinterpret_cast<void*>(dc);
  call(api, args, what);
  if (c.nbytes() > 0)
    runtime::cuda::check(d, d.cuMemcpyDtoH(c.raw_mutable_data(), dc, c.nbytes()), what + ": c");
  return c;
}

double matmul_seconds_on_gpu(DType dtype, int64_t m, int64_t n, int64_t k, int reps) {
  const std::string what = "matmul_seconds_on_gpu";
  const int code = dtype_code(dtype, what);
  const plugin::Api& api = runtime::cuda::cuda_plugin(what);
  const runtime::cuda::Driver& d = need_driver(what);
  DeviceBuffers buffers(d);
  const size_t size = dtype_size(dtype);
  plugin::Matmul args;
  args.dtype = code;
  args.m = m;
  args.n = n;
  args.k = k;
  // Device memory as allocated (not zeroed): the timing does not depend on the values.
  args.a = reinterpret_cast<const void*>(buffers.alloc(m * k * size, what + ": a"));
  args.b = reinterpret_cast<const void*>(buffers.alloc(k * n * size, what + ": b"));
  args.c = reinterpret_cast<void*>(buffers.alloc(m * n * size, what + ": c"));
  call(api, args, what);
  auto t0 = std::chrono::steady_clock::now();
  char err[512] = {0};
  for (int r = 0; r < reps; ++r)
    if (api.matmul(&args, err, sizeof err) != 0) throw Error(ErrorCode::kInternal, what + ": " + err);
  if (api.synchronize(err, sizeof err) != 0) throw Error(ErrorCode::kInternal, what + ": " + err);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
         std::max(reps, 1);
}

}  // namespace kiln::compiler::cuda

// PTX on the GPU through the driver's module API (LoadedPtx, ptx.h).
#include <algorithm>
#include <chrono>

#include "compiler/cuda/ptx.h"
#include "kiln/error.h"
#include "compiler/cuda/device_buffers.h"
#include "runtime/cuda/driver.h"

namespace kiln::compiler::cuda {

using runtime::cuda::CUdeviceptr;
using runtime::cuda::Driver;

std::shared_ptr<LoadedPtx> LoadedPtx::load(PtxModule module) {
  const std::string what = "cuda (" + module.name + "): loading PTX";
  const Driver& d = need_driver(what);
  std::shared_ptr<LoadedPtx> out(new LoadedPtx());
  out->module_ = std::move(module);
  std::string log(8192, '\0');
  int options[] = {runtime::cuda::kJitErrorLogBuffer,
                   runtime::cuda::kJitErrorLogBufferSizeBytes};
  void* values[] = {log.data(), reinterpret_cast<void*>(log.size())};
  runtime::cuda::CUmodule handle = nullptr;
  if (runtime::cuda::CUresult r =
          d.cuModuleLoadDataEx(&handle, out->module_.ptx.c_str(), 2, options, values);
      r != 0)
    throw Error(ErrorCode::kInternal, what + ": " + runtime::cuda::error_string(d, r) + ": " +
                                          std::string(log.c_str()));
  out->handle_ = handle;
  for (const PtxKernel& k : out->module_.kernels) {
    runtime::cuda::CUfunction fn = nullptr;
    runtime::cuda::check(d, d.cuModuleGetFunction(&fn, handle, k.entry.c_str()),
                         what + ": kernel " + k.entry);
    out->functions_.push_back(fn);
  }
  return out;
}

LoadedPtx::~LoadedPtx() {
  if (handle_ == nullptr) return;
  if (const Driver* d = runtime::cuda::driver()) {
    // Runs return before their kernels finish (compiler/run_device.cc): let them finish
    // before their code goes.
    d->cuCtxSynchronize();
    d->cuModuleUnload(static_cast<runtime::cuda::CUmodule>(handle_));
  }
}

std::vector<CUdeviceptr> LoadedPtx::stage(size_t k, const std::vector<Tensor>& inputs,
                                          void* buffers_ptr) const {
  const std::string what = "cuda (" + module_.name + ")";
  if (k >= module_.kernels.size())
    throw Error(ErrorCode::kInvalidArgument,
                what + ": run: kernel " + std::to_string(k) + " of " +
                    std::to_string(module_.kernels.size()));
  const PtxKernel& kernel = module_.kernels[k];
  if (inputs.size() != kernel.inputs.size())
    throw Error(ErrorCode::kInvalidArgument,
                what + ": run " + kernel.entry + ": expected " +
                    std::to_string(kernel.inputs.size()) + " inputs, got " +
                    std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || t.is_symbolic() || t.dtype() != kernel.inputs[i].dtype ||
        t.shape() != kernel.inputs[i].shape)
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": run " + kernel.entry + ": input " + std::to_string(i) + " is " +
                      (t.defined() ? TensorType{t.dtype(), t.shape()}.str() : "undefined") +
                      ", the kernel was compiled for " + kernel.inputs[i].str());
  }
  auto& buffers = *static_cast<DeviceBuffers*>(buffers_ptr);
  const Driver& d = buffers.d;
  std::vector<CUdeviceptr> args;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    CUdeviceptr p = buffers.alloc(t.nbytes(), what + ": input " + std::to_string(i));
    if (t.nbytes() > 0)
      runtime::cuda::check(d, d.cuMemcpyHtoD(p, t.raw_data(), t.nbytes()),
                           what + ": copying input " + std::to_string(i));
    args.push_back(p);
  }
  for (size_t o = 0; o < kernel.outputs.size(); ++o) {
    const TensorType& t = kernel.outputs[o];
    args.push_back(buffers.alloc(num_elements(t.shape) * dtype_size(t.dtype),
                                 what + ": output " + std::to_string(o)));
  }
  return args;
}

void LoadedPtx::launch(size_t k, std::vector<CUdeviceptr>& args) const {
  const PtxKernel& kernel = module_.kernels[k];
  if (kernel.items == 0) return;
  const Driver& d = need_driver("cuda (" + module_.name + ")");
  std::vector<void*> params;
  for (CUdeviceptr& p : args) params.push_back(&p);
  const LaunchDims dims = launch_dims(kernel.items);
  runtime::cuda::check(
      d,
      d.cuLaunchKernel(static_cast<runtime::cuda::CUfunction>(functions_[k]),
                       static_cast<unsigned>(dims.blocks), 1, 1,
                       static_cast<unsigned>(dims.threads), 1, 1, 0, nullptr, params.data(),
                       nullptr),
      "cuda (" + module_.name + "): launching " + kernel.entry);
}

void LoadedPtx::launch_on_device(size_t k, void* const* inputs, void* const* outputs) const {
  const PtxKernel& kernel = module_.kernels.at(k);
  std::vector<CUdeviceptr> args;
  for (int i = 0; i < kernel.num_inputs; ++i)
    args.push_back(reinterpret_cast<CUdeviceptr>(inputs[i]));
  for (int o = 0; o < kernel.num_outputs; ++o)
    args.push_back(reinterpret_cast<CUdeviceptr>(outputs[o]));
  launch(k, args);
}

std::vector<Tensor> LoadedPtx::run(size_t k, const std::vector<Tensor>& inputs) const {
  const std::string what = "cuda (" + module_.name + ")";
  const Driver& d = need_driver(what);
  DeviceBuffers buffers(d);
  std::vector<CUdeviceptr> args = stage(k, inputs, &buffers);
  launch(k, args);
  runtime::cuda::check(d, d.cuCtxSynchronize(), what + ": running " + module_.kernels[k].entry);
  std::vector<Tensor> outputs;
  for (size_t o = 0; o < module_.kernels[k].outputs.size(); ++o) {
    const TensorType& t = module_.kernels[k].outputs[o];
    outputs.push_back(Tensor::empty(t.dtype, t.shape));
    if (outputs.back().nbytes() > 0)
      runtime::cuda::check(d,
                           d.cuMemcpyDtoH(outputs.back().raw_mutable_data(),
                                          args[inputs.size() + o], outputs.back().nbytes()),
                           what + ": copying output " + std::to_string(o));
  }
  return outputs;
}

double LoadedPtx::seconds_per_run(size_t k, const std::vector<Tensor>& inputs, int reps) const {
  const std::string what = "cuda (" + module_.name + ")";
  const Driver& d = need_driver(what);
  DeviceBuffers buffers(d);
  std::vector<CUdeviceptr> args = stage(k, inputs, &buffers);
  launch(k, args);
  runtime::cuda::check(d, d.cuCtxSynchronize(), what + ": warm-up");
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) launch(k, args);
  runtime::cuda::check(d, d.cuCtxSynchronize(), what + ": timed runs");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
         std::max(reps, 1);
}

double device_copy_seconds(size_t bytes, int reps) {
  const Driver& d = need_driver("cuda: device copy");
  DeviceBuffers buffers(d);
  CUdeviceptr src = buffers.alloc(bytes, "cuda: device copy source");
  CUdeviceptr dst = buffers.alloc(bytes, "cuda: device copy destination");
  runtime::cuda::check(d, d.cuMemcpyDtoD(dst, src, bytes), "cuda: device copy");
  runtime::cuda::check(d, d.cuCtxSynchronize(), "cuda: device copy");
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    runtime::cuda::check(d, d.cuMemcpyDtoD(dst, src, bytes), "cuda: device copy");
  runtime::cuda::check(d, d.cuCtxSynchronize(), "cuda: device copy");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
         std::max(reps, 1);
}

}  // namespace kiln::compiler::cuda

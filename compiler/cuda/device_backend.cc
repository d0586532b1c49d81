// The CUDA backend's DeviceBackend (device_backend.h).
#include "compiler/cuda/device_backend.h"

#include <map>
#include <mutex>
#include <string>

#include "compiler/cuda/device_buffers.h"
#include "compiler/cuda/ptx.h"
#include "runtime/cuda/plugin_loader.h"

namespace kiln::compiler::cuda {
namespace {

namespace plugin = runtime::cuda::plugin;

// Kernel `k` of a loaded module.
class CudaKernel final : public DeviceKernel {
 public:
  CudaKernel(std::shared_ptr<const LoadedPtx> module, size_t k, FusedSubgraph sg)
      : module_(std::move(module)), k_(k), sg_(std::move(sg)), shape_(sg_.iteration_shape()) {}
  const FusedSubgraph& subgraph() const override { return sg_; }
  const Shape& shape() const override { return shape_; }
  bool in_place_safe() const override { return !sg_.has_reductions(); }
  void launch(void* const* inputs, void* const* outputs) const override {
    module_->launch_on_device(k_, inputs, outputs);
  }
  void run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const override {
    *outputs = module_->run(k_, inputs);
  }

 private:
  std::shared_ptr<const LoadedPtx> module_;
  size_t k_;
  FusedSubgraph sg_;
  Shape shape_;
};

// A scatter_add loop: kernel 0 of its own module.
class CudaLoop final : public DeviceLoop {
 public:
  explicit CudaLoop(std::shared_ptr<const LoadedPtx> module) : module_(std::move(module)) {}
  void launch(void* const* inputs, void* const* outputs) const override {
    if (module_->module().kernels[0].items > 0) module_->launch_on_device(0, inputs, outputs);
  }

 private:
  std::shared_ptr<const LoadedPtx> module_;
};

int plugin_dtype(DType t) { return t == f32 ? plugin::kF32 : t == f16 ? plugin::kF16 : plugin::kBF16; }

plugin::Conv conv_args(const DeviceConv& c) {
  plugin::Conv a;
  a.dtype = plugin_dtype(c.dtype);
  a.pass = c.pass == DeviceConv::kForward     ? plugin::kConvForward
           : c.pass == DeviceConv::kInputGrad ? plugin::kConvInputGrad
                                              : plugin::kConvKernelGrad;
  a.n = c.batch, a.h = c.in_h, a.w = c.in_w, a.c = c.c_in;
  a.k = c.c_out, a.r = c.k_h, a.s = c.k_w, a.oh = c.out_h, a.ow = c.out_w;
  a.pad_h = c.pad_h, a.pad_w = c.pad_w, a.stride_h = c.stride_h, a.stride_w = c.stride_w;
  a.dilation_h = c.dilation_h, a.dilation_w = c.dilation_w, a.groups = c.groups;
  a.x = c.x, a.w_ptr = c.w, a.y = c.y;
  a.workspace = c.workspace;
  a.workspace_bytes = static_cast<size_t>(c.workspace_bytes);
  return a;
}

class CudaGpu final : public DeviceBackend {
 public:
  std::string name() const override { return "cuda:0"; }
  Device device() const override { return Device::cuda(0); }
  const FusionTarget& fusion_target() const override { return cuda::fusion_target(); }

  void* allocate(int64_t bytes, const std::string& what) const override {
    if (bytes <= 0) return nullptr;
    need_driver(what);  // this thread's context current: the allocator may grow (cuMemAlloc)
    try {
      return runtime::cuda::device_allocator().allocate(static_cast<size_t>(bytes));
    } catch (const Error& e) {
      throw Error(e.code(), what + ": " + e.what());
    }
  }
  void deallocate(void* p) const override {
    if (p == nullptr) return;
    need_driver("cuda:0: freeing device memory");
    runtime::cuda::device_allocator().deallocate(p);
  }
  void upload(void* device, const void* host, int64_t bytes) const override {
    const runtime::cuda::Driver& d = need_driver("cuda:0: copy to the device");
    runtime::cuda::check(
        d, d.cuMemcpyHtoD(reinterpret_cast<runtime::cuda::CUdeviceptr>(device), host, bytes),
        "cuda:0: copy to the device");
  }
  void download(void* host, const void* device, int64_t bytes) const override {
    const runtime::cuda::Driver& d = need_driver("cuda:0: copy from the device");
    runtime::cuda::check(
        d,
        d.cuMemcpyDtoH(host, reinterpret_cast<runtime::cuda::CUdeviceptr>(device), bytes),
        "cuda:0: copy from the device");
  }
  void copy(void* dst, const void* src, int64_t bytes) const override {
    if (bytes <= 0) return;
    const runtime::cuda::Driver& d = need_driver("cuda:0: copy within the device");
    runtime::cuda::check(d,
                         d.cuMemcpyDtoD(reinterpret_cast<runtime::cuda::CUdeviceptr>(dst),
                                        reinterpret_cast<runtime::cuda::CUdeviceptr>(src),
                                        static_cast<size_t>(bytes)),
                         "cuda:0: copy within the device");
  }

  std::vector<std::shared_ptr<const DeviceKernel>> compile(
      const std::vector<FusedSubgraph>& subgraphs,
      std::vector<std::string>* errors) const override {
    std::vector<std::shared_ptr<const DeviceKernel>> out(subgraphs.size());
    compile_together_or_alone(
        subgraphs,
        [&](const std::vector<size_t>& which, const std::vector<FusedSubgraph>& sgs) {
          std::shared_ptr<const LoadedPtx> module = LoadedPtx::load(compile_ptx(sgs));
          for (size_t j = 0; j < which.size(); ++j)
            out[which[j]] = std::make_shared<CudaKernel>(module, j, sgs[j]);
        },
        errors);
    return out;
  }

  // One module per geometry, kept while any program holds its loop (a model's steps and their
  // retraces share them).
  std::shared_ptr<const DeviceLoop> compile_scatter_add(const DeviceScatterAdd& s) const override {
    if (!scatter_add_dtype(s.dtype)) return nullptr;
    const std::string key = std::string(dtype_name(s.dtype)) + " " +
                            std::to_string(s.outer) + " " + std::to_string(s.dim) + " " +
                            std::to_string(s.inner) + " " + std::to_string(s.count);
    std::lock_guard<std::mutex> lock(loops_mu_);
    if (auto it = loops_.find(key); it != loops_.end())
      if (std::shared_ptr<const DeviceLoop> loop = it->second.lock()) return loop;
    auto loop = std::make_shared<CudaLoop>(LoadedPtx::load(compile_scatter_add_ptx(s)));
    loops_[key] = loop;
    return loop;
  }

  bool dot_dtype(DType t) const override { return t == f32 || t == f16 || t == bf16; }
  void dot(const DeviceDot& d) const override {
    const plugin::Api& api = runtime::cuda::cuda_plugin("cuda:0: dot");
    plugin::Matmul m;
    m.dtype = plugin_dtype(d.dtype);
    m.batch = d.batch;
    m.m = d.m;
    m.n = d.n;
    m.k = d.k;
    m.trans_a = d.trans_a;
    m.trans_b = d.trans_b;
    m.a = d.a;
    m.b = d.b;
    m.c = d.c;
    m.bias = d.bias;
    m.activation = d.relu ? plugin::kRelu : plugin::kNone;
    char err[512] = {0};
    if (api.matmul(&m, err, sizeof err) != 0)
      throw Error(ErrorCode::kInternal, std::string("cuda:0: dot: ") + err);
  }

  int64_t conv_workspace(const DeviceConv& c) const override {
    const plugin::Api& api = runtime::cuda::cuda_plugin("cuda:0: convolution");
    if (api.conv_workspace == nullptr || !dot_dtype(c.dtype)) return -1;  // built without cuDNN
    const plugin::Conv args = conv_args(c);
    size_t bytes = 0;
    char err[512] = {0};
    // A geometry cuDNN refuses runs on the host (the reason is not an error of the program).
    if (api.conv_workspace(&args, &bytes, err, sizeof err) != 0) return -1;
    return static_cast<int64_t>(bytes);
  }
  void conv(const DeviceConv& c) const override {
    const plugin::Api& api = runtime::cuda::cuda_plugin("cuda:0: convolution");
    const plugin::Conv args = conv_args(c);
    char err[512] = {0};
    if (api.conv == nullptr || api.conv(&args, err, sizeof err) != 0)
      throw Error(ErrorCode::kInternal, std::string("cuda:0: ") + err);
  }

  int64_t pool_workspace(const DevicePool& p) const override {
    const plugin::Api& api = runtime::cuda::cuda_plugin("cuda:0: pooling");
    if (api.pool == nullptr || !dot_dtype(p.dtype)) return -1;  // built without cuDNN
    return cudnn_pool_scratch_bytes(p);
  }
  void pool(const DevicePool& p) const override {
    const plugin::Api& api = runtime::cuda::cuda_plugin("cuda:0: pooling");
    plugin::Pool a;
    a.dtype = plugin_dtype(p.dtype);
    a.kind = p.kind == DevicePool::kMax       ? plugin::kPoolMax
             : p.kind == DevicePool::kSum     ? plugin::kPoolSum
             : p.kind == DevicePool::kMaxGrad ? plugin::kPoolMaxGrad
                                              : plugin::kPoolSumGrad;
    a.n = p.batch, a.h = p.in_h, a.w = p.in_w, a.c = p.channels, a.oh = p.out_h, a.ow = p.out_w;
    a.win_h = p.win_h, a.win_w = p.win_w, a.stride_h = p.stride_h, a.stride_w = p.stride_w;
    a.pad_h = p.pad_h, a.pad_w = p.pad_w;
    a.x = p.x, a.y = p.y, a.dy = p.dy, a.dx = p.dx;
    a.workspace = p.workspace;
    a.workspace_bytes = static_cast<size_t>(p.workspace_bytes);
    char err[512] = {0};
    if (api.pool == nullptr || api.pool(&a, err, sizeof err) != 0)
      throw Error(ErrorCode::kInternal, std::string("cuda:0: ") + err);
  }

  void synchronize() const override {
    const runtime::cuda::Driver& d = need_driver("cuda:0: synchronize");
    runtime::cuda::check(d, d.cuCtxSynchronize(), "cuda:0: running the program");
  }

 private:
  mutable std::mutex loops_mu_;
  mutable std::map<std::string, std::weak_ptr<const DeviceLoop>> loops_;
};

}  // namespace

std::shared_ptr<const DeviceBackend> device_backend(const Device& device) {
  const std::string what = "compile for " + device.str();
  if (device.type != DeviceType::kCuda)
    throw Error(ErrorCode::kInvalidArgument, what + ": not a CUDA device");
  need_driver(what);  // kUnavailable, saying why
  const int count = runtime::cuda::device_count();
  if (device.index < 0 || device.index >= count)
    throw Error(ErrorCode::kInvalidArgument,
                what + ": this machine has " + std::to_string(count) + " GPU" +
                    (count == 1 ? "" : "s"));
  if (device.index != 0)
    throw Error(ErrorCode::kUnimplemented, what + ": only cuda:0 is used so far");
  static const auto gpu = std::make_shared<const CudaGpu>();
  return gpu;
}

}  // namespace kiln::compiler::cuda

// The emulated GPU (emulated_device.h).
#include "compiler/cpu/emulated_device.h"

#include <atomic>
#include <cstring>
#include <new>

#include "compiler/cpu/fused_kernel.h"
#include "compiler/llvm_ir/grid_kernel.h"
#include "compiler/llvm_ir/loop_target.h"
#include "compiler/llvm_ir/scatter_kernel.h"
#include "kiln/op_registry.h"
#include "runtime/execute.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler::cpu {
namespace {

constexpr unsigned char kPoison = 0xA5;
constexpr size_t kAlign = 256;  // as cudaMalloc's

struct Counters {
  std::atomic<int64_t> uploads{0}, downloads{0}, upload_bytes{0}, download_bytes{0};
  std::atomic<int64_t> copies{0}, copy_bytes{0};
  std::atomic<int64_t> launches{0}, dots{0}, convs{0}, pools{0}, live{0};
};

Counters& counters() {
  static Counters c;
  return c;
}

// A grid kernel on a host grid (run_on_host_grid).
class EmulatedKernel final : public DeviceKernel {
 public:
  EmulatedKernel(FusedSubgraph sg, GridFn fn, std::shared_ptr<void> owner)
      : sg_(std::move(sg)), shape_(sg_.iteration_shape()), items_(llvm_ir::grid_items(sg_)),
        fn_(fn), owner_(std::move(owner)) {}

  const FusedSubgraph& subgraph() const override { return sg_; }
  const Shape& shape() const override { return shape_; }
  bool in_place_safe() const override { return !sg_.has_reductions(); }

  void launch(void* const* inputs, void* const* outputs) const override {
    if (items_ == 0) return;
    counters().launches++;
    run_on_host_grid(fn_, const_cast<void**>(inputs), const_cast<void**>(outputs), items_);
  }

  void run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const override {
    std::vector<void*> in, out;
    for (const Tensor& t : inputs) in.push_back(const_cast<void*>(t.raw_data()));
    outputs->resize(sg_.outputs.size());
    for (size_t o = 0; o < sg_.outputs.size(); ++o) {
      const TensorType type = sg_.output_type(static_cast<int>(o));
      Tensor& t = (*outputs)[o];
      if (!t.defined() || t.dtype() != type.dtype || t.shape() != type.shape)
        t = Tensor::empty(type.dtype, type.shape);
      out.push_back(t.raw_mutable_data());
    }
    launch(in.data(), out.data());
  }

 private:
  FusedSubgraph sg_;
  Shape shape_;
  int64_t items_ = 0;
  GridFn fn_ = nullptr;
  std::shared_ptr<void> owner_;  // the JIT'd code
};

// The scatter_add loop's grid on a host grid.
class EmulatedLoop final : public DeviceLoop {
 public:
  EmulatedLoop(int64_t items, HostGridKernels grid) : items_(items), grid_(std::move(grid)) {}
  void launch(void* const* inputs, void* const* outputs) const override {
    if (items_ == 0) return;
    counters().launches++;
    run_on_host_grid(grid_.fns.at(0), const_cast<void**>(inputs), const_cast<void**>(outputs),
                     items_);
  }

 private:
  int64_t items_;
  HostGridKernels grid_;
};

// A host tensor over `bytes` of emulated device memory (owned elsewhere).
Tensor over(const void* p, DType dtype, Shape shape) {
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->dtype = dtype;
  const size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(dtype);
  impl->shape = std::move(shape);
  // An owner that owns nothing (aliasing an empty pointer): the Storage frees nothing.
  std::shared_ptr<void> none(std::shared_ptr<void>(), const_cast<void*>(p));
  impl->storage = std::make_shared<detail::Storage>(std::move(none), const_cast<void*>(p), bytes);
  return Tensor(std::move(impl));
}

class EmulatedGpu final : public DeviceBackend {
 public:
  std::string name() const override { return "emulated-gpu"; }
  Device device() const override { return Device::cuda(0); }
  const FusionTarget& fusion_target() const override {
    return llvm_ir::device_fusion_target();
  }

  void* allocate(int64_t bytes, const std::string&) const override {
    if (bytes <= 0) return nullptr;
    void* p = ::operator new(static_cast<size_t>(bytes), std::align_val_t(kAlign));
    std::memset(p, kPoison, static_cast<size_t>(bytes));
    counters().live++;
    return p;
  }
  void deallocate(void* p) const override {
    if (p == nullptr) return;
    ::operator delete(p, std::align_val_t(kAlign));
    counters().live--;
  }
  void upload(void* device, const void* host, int64_t bytes) const override {
    std::memcpy(device, host, static_cast<size_t>(bytes));
    counters().uploads++;
    counters().upload_bytes += bytes;
  }
  void download(void* host, const void* device, int64_t bytes) const override {
    std::memcpy(host, device, static_cast<size_t>(bytes));
    counters().downloads++;
    counters().download_bytes += bytes;
  }
  void copy(void* dst, const void* src, int64_t bytes) const override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    counters().copies++;
    counters().copy_bytes += bytes;
  }

  std::vector<std::shared_ptr<const DeviceKernel>> compile(
      const std::vector<FusedSubgraph>& subgraphs,
      std::vector<std::string>* errors) const override {
    std::vector<std::shared_ptr<const DeviceKernel>> out(subgraphs.size());
    compile_together_or_alone(
        subgraphs,
        [&](const std::vector<size_t>& which, const std::vector<FusedSubgraph>& sgs) {
          HostGridKernels grid = compile_grid_kernels_for_host(sgs);
          for (size_t j = 0; j < which.size(); ++j)
            out[which[j]] = std::make_shared<EmulatedKernel>(sgs[j], grid.fns[j], grid.owner);
        },
        errors);
    return out;
  }

  std::shared_ptr<const DeviceLoop> compile_scatter_add(const DeviceScatterAdd& s) const override {
    if (!scatter_add_dtype(s.dtype)) return nullptr;
    return std::make_shared<EmulatedLoop>(llvm_ir::scatter_add_items(s),
                                          compile_scatter_add_for_host(s));
  }

  bool dot_dtype(DType t) const override { return t == f32 || t == f16 || t == bf16; }
  void dot(const DeviceDot& d) const override {
    counters().dots++;
    // The CPU's dot kernel with the attributes the graph's dot has: the CPU program's bits.
    // (The kernel itself, not the eager op, which would record into a graph being built.)
    // A batched dot as one with a single batch axis.
    const bool batched = d.batch > 1;
    auto shape = [&](int64_t rows, int64_t cols) {
      return batched ? Shape{d.batch, rows, cols} : Shape{rows, cols};
    };
    const int64_t o = batched ? 1 : 0;
    const Tensor a = over(d.a, d.dtype, d.trans_a ? shape(d.k, d.m) : shape(d.m, d.k));
    const Tensor b = over(d.b, d.dtype, d.trans_b ? shape(d.n, d.k) : shape(d.k, d.n));
    const std::vector<int64_t> batch = batched ? std::vector<int64_t>{0} : std::vector<int64_t>{};
    Attrs attrs{{"lhs_contract", std::vector<int64_t>{(d.trans_a ? 0 : 1) + o}},
                {"rhs_contract", std::vector<int64_t>{(d.trans_b ? 1 : 0) + o}},
                {"lhs_batch", batch},
                {"rhs_batch", batch}};
    Tensor c;
    if (d.bias == nullptr && !d.relu) {
      static const OpDef& def = OpRegistry::global().find("dot");
      c = runtime::run_kernel(def, "emulated-gpu dot", {a, b}, attrs)[0];
    } else {
      // An epilogue: the CPU's fused_dot, which applies it to the sums as cuBLASLt's does.
      static const OpDef& def = OpRegistry::global().find(kFusedDotOp);
      attrs.set("activation", std::string(d.relu ? "relu" : "none"));
      std::vector<Tensor> in = {a, b};
      if (d.bias != nullptr) in.push_back(over(d.bias, d.dtype, {d.n}));
      c = runtime::run_kernel(def, "emulated-gpu fused_dot", in, attrs)[0];
    }
    std::memcpy(d.c, c.raw_data(), c.nbytes());
  }

  // Every convolution a DeviceConv describes, with the kernel's size as scratch (as CUDA's,
  // which transposes the kernel there), so that the program's scratch is exercised.
  int64_t conv_workspace(const DeviceConv& c) const override {
    if (c.dtype != f32 && c.dtype != f16 && c.dtype != bf16) return -1;
    return c.k_h * c.k_w * (c.c_in / c.groups) * c.c_out * dtype_size(c.dtype);
  }
  void conv(const DeviceConv& c) const override {
    counters().convs++;
    if (c.workspace_bytes > 0) {
      if (c.workspace == nullptr) throw Error(ErrorCode::kInternal, "emulated-gpu conv: no scratch");
      std::memset(c.workspace, kPoison, static_cast<size_t>(c.workspace_bytes));
    }
    // The CPU's convolution kernels with the graph's attributes (as 2-d): the CPU's bits.
    const Shape xs{c.batch, c.in_h, c.in_w, c.c_in}, ys{c.batch, c.out_h, c.out_w, c.c_out},
        ws{c.k_h, c.k_w, c.c_in / c.groups, c.c_out};
    Attrs attrs{{"strides", std::vector<int64_t>{c.stride_h, c.stride_w}},
                {"padding_low", std::vector<int64_t>{c.pad_h, c.pad_w}},
                {"padding_high", std::vector<int64_t>{c.pad_h, c.pad_w}},
                {"dilation", std::vector<int64_t>{c.dilation_h, c.dilation_w}},
                {"groups", c.groups}};
    const char* op = "convolution";
    std::vector<Tensor> in;
    void* out = nullptr;
    switch (c.pass) {
      case DeviceConv::kForward:
        in = {over(c.x, c.dtype, xs), over(c.w, c.dtype, ws)};
        out = c.y;
        break;
      case DeviceConv::kInputGrad:
        op = "convolution_input_grad";
        attrs.set("input_spatial", std::vector<int64_t>{c.in_h, c.in_w});
        in = {over(c.y, c.dtype, ys), over(c.w, c.dtype, ws)};
        out = c.x;
        break;
      case DeviceConv::kKernelGrad:
        op = "convolution_kernel_grad";
        attrs.set("kernel_spatial", std::vector<int64_t>{c.k_h, c.k_w});
        in = {over(c.x, c.dtype, xs), over(c.y, c.dtype, ys)};
        out = c.w;
        break;
    }
    const Tensor r = runtime::run_kernel(OpRegistry::global().find(op), "emulated-gpu conv", in,
                                         attrs)[0];
    std::memcpy(out, r.raw_data(), r.nbytes());
  }

  // Every pooling a DevicePool describes, with CUDA's scratch.
  int64_t pool_workspace(const DevicePool& p) const override {
    if (p.dtype != f32 && p.dtype != f16 && p.dtype != bf16) return -1;
    return cudnn_pool_scratch_bytes(p);
  }
  void pool(const DevicePool& p) const override {
    counters().pools++;
    if (p.workspace_bytes > 0) {
      if (p.workspace == nullptr) throw Error(ErrorCode::kInternal, "emulated-gpu pool: no scratch");
      std::memset(p.workspace, kPoison, static_cast<size_t>(p.workspace_bytes));
    }
    const Shape xs{p.batch, p.in_h, p.in_w, p.channels}, ys{p.batch, p.out_h, p.out_w, p.channels};
    Attrs attrs{{"window", std::vector<int64_t>{1, p.win_h, p.win_w, 1}},
                {"strides", std::vector<int64_t>{1, p.stride_h, p.stride_w, 1}},
                {"padding_low", std::vector<int64_t>{0, p.pad_h, p.pad_w, 0}},
                {"padding_high", std::vector<int64_t>{0, p.pad_h, p.pad_w, 0}}};
    static const char* const kOps[] = {"reduce_window_max", "reduce_window_sum",
                                       "reduce_window_max_grad", "reduce_window_sum_grad"};
    std::vector<Tensor> in;
    void* out = p.kind == DevicePool::kMax || p.kind == DevicePool::kSum ? p.y : p.dx;
    switch (p.kind) {
      case DevicePool::kMax:
      case DevicePool::kSum: in = {over(p.x, p.dtype, xs)}; break;
      case DevicePool::kMaxGrad: in = {over(p.x, p.dtype, xs), over(p.dy, p.dtype, ys)}; break;
      case DevicePool::kSumGrad:
        attrs.set("operand_shape", std::vector<int64_t>(xs.begin(), xs.end()));
        in = {over(p.dy, p.dtype, ys)};
        break;
    }
    const Tensor r = runtime::run_kernel(OpRegistry::global().find(kOps[p.kind]),
                                         "emulated-gpu pool", in, attrs)[0];
    std::memcpy(out, r.raw_data(), r.nbytes());
  }

  void synchronize() const override {}
  bool poisons_host_arena() const override { return true; }
};

}  // namespace

std::shared_ptr<const DeviceBackend> emulated_gpu() {
  static const auto gpu = std::make_shared<const EmulatedGpu>();
  return gpu;
}

EmulatedGpuCounts emulated_gpu_counts() {
  const Counters& c = counters();
  EmulatedGpuCounts out;
  out.uploads = c.uploads.load();
  out.downloads = c.downloads.load();
  out.upload_bytes = c.upload_bytes.load();
  out.download_bytes = c.download_bytes.load();
  out.copies = c.copies.load();
  out.copy_bytes = c.copy_bytes.load();
  out.launches = c.launches.load();
  out.dots = c.dots.load();
  out.convs = c.convs.load();
  out.pools = c.pools.load();
  out.live_allocations = c.live.load();
  return out;
}

}  // namespace kiln::compiler::cpu

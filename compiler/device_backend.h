// A device with memory of its own (a GPU) that a compiled program runs on: what the device
// executable (compiler/run_device.cc) needs from it. Its fused loops run as device kernels
// (gathers read by them), its 2-d dots as device matmuls, the convolutions and pooling it takes
// through its kernels for them and scatter_adds as its loop; every other op runs on the host,
// its inputs copied down and its outputs up as the run needs them. Two backends implement it:
// CUDA's (compiler/cuda/device_backend.h) and, for tests, an emulated GPU whose memory is host
// memory the program must still copy to and from (compiler/cpu/emulated_device.h). No CUDA or LLVM
// types appear here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/executable.h"
#include "compiler/fused_subgraph.h"
#include "compiler/passes/fusion.h"
#include "src/core/device_memory.h"

namespace kiln::compiler {

// A fused loop compiled for a device. run() (CompiledFusion's, on host tensors) stages them
// through device memory; the device executable calls launch() on device pointers instead.
class DeviceKernel : public CompiledFusion {
 public:
  // One device pointer per input buffer, then per output, of the subgraph's types; returns
  // when the kernel is queued (the device's stream orders what follows).
  virtual void launch(void* const* inputs, void* const* outputs) const = 0;
};

// Row-major C[m, n] = act(op(A) op(B) + bias) on device pointers: A [m, k] ([k, m] when
// trans_a), B [k, n] ([n, k] when trans_b), all of `dtype`; m, n and k are positive. With
// batch > 1, `batch` such products, one after another in each buffer (A [batch, m, k], and so
// on). The epilogue (a fused_dot's): a bias of n elements added to every row of each product
// (none when null), then relu when `relu`; both applied to the f32 sums before C's one rounding.
struct DeviceDot {
  DType dtype = f32;
  int64_t batch = 1;
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  const void* bias = nullptr;
  bool relu = false;
};

// The DeviceDot (dtype, sizes and transposes; no pointers or epilogue) of a dot of operands of
// types `a` and `b` with dot's attributes, when a device's matmul can take it: the same dtype,
// the batch axes leading both operands in order, one contracted axis each, no empty dimension.
// Else nullopt, with the reason in *why.
std::optional<DeviceDot> device_dot_geometry(const TensorType& a, const TensorType& b,
                                             const Attrs& attrs, std::string* why = nullptr);

// A 2-d convolution (a 1-d one as height 1) over NHWC values: input x [batch, in_h, in_w, c_in],
// kernel w in Kiln's HWIO [k_h, k_w, c_in / groups, c_out], output y [batch, out_h, out_w,
// c_out]; cross-correlation, each spatial axis padded alike on both sides, no input dilation,
// all of `dtype`. Every size is positive. The pass says which operand is written: the forward
// pass reads x and w and writes y; the input gradient reads y (dy) and w and writes x (dx); the
// kernel gradient reads x and y (dy) and writes w (dw).
struct DeviceConv {
  enum Pass : uint8_t { kForward, kInputGrad, kKernelGrad };
  Pass pass = kForward;
  DType dtype = f32;
  int64_t batch = 0, in_h = 0, in_w = 0, c_in = 0;
  int64_t out_h = 0, out_w = 0, c_out = 0;
  int64_t k_h = 0, k_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1, groups = 1;
  void* x = nullptr;
  void* w = nullptr;
  void* y = nullptr;
  // Device scratch of conv_workspace()'s size (null when 0), the call's alone until it is done.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

// Pooling over the spatial axes of NHWC values x [batch, in_h, in_w, channels] into
// y [batch, out_h, out_w, channels]: windows of win_h x win_w taps at strides stride_h and
// stride_w, each spatial axis padded alike on both sides (a maximum ignores the padding, a sum
// counts it as 0), of `dtype`; every size positive. kMax and kSum read x and write y (each
// window's maximum, or sum); kMaxGrad reads x and dy (y's shape) and writes dx (x's), each
// window's gradient going to its maximum; kSumGrad reads dy and writes dx.
struct DevicePool {
  enum Kind : uint8_t { kMax, kSum, kMaxGrad, kSumGrad };
  Kind kind = kMax;
  DType dtype = f32;
  int64_t batch = 0, in_h = 0, in_w = 0, channels = 0, out_h = 0, out_w = 0;
  int64_t win_h = 0, win_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  void* x = nullptr;
  void* y = nullptr;
  void* dy = nullptr;
  void* dx = nullptr;
  void* workspace = nullptr;  // as DeviceConv's
  int64_t workspace_bytes = 0;
};

// The scratch cuDNN's pooling asks of a DevicePool: the pooled x for a max-pool gradient (its
// backward pass reads the pooled values), a stand-in x for a sum-pool gradient (which it asks
// for and does not read); none otherwise.
inline int64_t cudnn_pool_scratch_bytes(const DevicePool& p) {
  if (p.kind == DevicePool::kMaxGrad)
    return p.batch * p.out_h * p.out_w * p.channels * dtype_size(p.dtype);
  if (p.kind == DevicePool::kSumGrad)
    return p.batch * p.in_h * p.in_w * p.channels * dtype_size(p.dtype);
  return 0;
}

// scatter_add on device pointers, as its kernel computes it: y = x, then for each index j in
// order, y[o, indices[j], k] += updates[o, j, k], each sum rounded to `dtype`; x and y are
// [outer, dim, inner], indices `count` i32 or i64 values, updates [outer, count, inner]. A device runs it as a copy of x into y and then its loop over a row plan
// (scatter_add_plan) the program makes on the host, where it checks the indices: one item per
// (o, row, k) for each row the indices name, adding that row's updates in the indices' order,
// the kernel's order, so duplicate indices sum to the kernel's bits without atomics, and the
// rows run in parallel.
struct DeviceScatterAdd {
  DType dtype = f32;
  int64_t outer = 1, dim = 0, inner = 1, count = 0;
};

// The dtypes a device's scatter_add loop adds in (those whose sums need no rounding step).
inline bool scatter_add_dtype(DType t) { return t == f32 || t == f64 || t == i32 || t == i64; }

// The row plan of `indices` (i32 or i64, every one in [0, dim)) for a scatter_add loop, as
// i64: [rows, row_0 .. row_{rows-1}, start_0 .. start_rows, j ...]: the distinct rows the
// indices name, ascending; row r's positions j (ascending) at start_r .. start_{r+1} - 1 of
// the j list.
std::vector<int64_t> scatter_add_plan(const Tensor& indices, int64_t dim);

// A loop compiled for a device that is not a fused subgraph's (a scatter_add's): launched like
// a DeviceKernel, on device pointers to its inputs, then its outputs.
class DeviceLoop {
 public:
  virtual ~DeviceLoop() = default;
  virtual void launch(void* const* inputs, void* const* outputs) const = 0;
};

// Every member is safe to call from several threads at once (runs may be concurrent).
// Its memory is what device tensors (Tensor::to(Device)) are made of: detail::DeviceMemory.
class DeviceBackend : public detail::DeviceMemory {
 public:
  virtual std::string name() const = 0;  // "cuda:0", "emulated-gpu"
  // The device its programs run on and its tensors live on (the emulated GPU stands for
  // cuda:0).
  Device device() const override = 0;
  // What its kernels compute: the epilogue fusion and fusion passes ask it.
  virtual const FusionTarget& fusion_target() const = 0;

  // Device memory. allocate throws kiln::Error (kResourceExhausted beyond the device's limit,
  // naming `what`); a zero-byte request may return null.
  void* allocate(int64_t bytes, const std::string& what) const override = 0;
  void deallocate(void* p) const override = 0;
  // Copies, ordered after everything queued before them; download returns when the bytes are
  // on the host.
  void upload(void* device, const void* host, int64_t bytes) const override = 0;
  void download(void* host, const void* device, int64_t bytes) const override = 0;
  // A copy within the device's memory, ordered like a kernel (queued after what came before).
  virtual void copy(void* dst, const void* src, int64_t bytes) const = 0;

  // One kernel per subgraph, compiled together; a subgraph the device cannot compile gets a
  // null kernel and its reason in (*errors)[i] (its nodes then run on the host).
  virtual std::vector<std::shared_ptr<const DeviceKernel>> compile(
      const std::vector<FusedSubgraph>& subgraphs, std::vector<std::string>* errors) const = 0;

  // Whether dot() takes this dtype, and the dot itself (queued, like a kernel).
  virtual bool dot_dtype(DType t) const = 0;
  virtual void dot(const DeviceDot& args) const = 0;

  // Whether conv() runs `c` (its pointers unset): the bytes of scratch it then needs, else -1.
  // Called when a program is compiled; a backend may choose its algorithm for the geometry here.
  virtual int64_t conv_workspace(const DeviceConv& c) const { return -1; }
  // The convolution (queued, like a kernel); only for a `c` conv_workspace() took.
  virtual void conv(const DeviceConv& c) const {
    throw Error(ErrorCode::kInternal, name() + ": convolution: not a device convolution");
  }

  // The same for pooling. On ties a device's max-pool gradient may pick another of the equal
  // elements than the CPU's (the first in row-major window order).
  virtual int64_t pool_workspace(const DevicePool& p) const { return -1; }
  virtual void pool(const DevicePool& p) const {
    throw Error(ErrorCode::kInternal, name() + ": pooling: not a device pooling");
  }

  // The scatter_add loop for `s` (inputs updates and a row plan on the device; output y,
  // holding x), or null when the device has none (the op then runs on the host). Called when a
  // program is compiled.
  virtual std::shared_ptr<const DeviceLoop> compile_scatter_add(const DeviceScatterAdd& s) const {
    (void)s;
    return nullptr;
  }

  // Waits for everything queued. A run does not (its copies to the host wait for the work
  // before them); profiling does, after each thunk.
  virtual void synchronize() const = 0;

  // TEST ONLY (the emulated GPU): each run of a device program first fills its host arena with
  // a poison pattern, so that a host thunk reading a value only the device holds gets wrong
  // results (the executable's reused arena would still hold the last run's value).
  virtual bool poisons_host_arena() const { return false; }
};

// For DeviceBackend::compile: `build(which, sgs)` compiles subgraphs[which] (given as `sgs`, in
// that order) together and keeps their kernels. All of them first; when that throws, each
// alone, so that only a subgraph failing by itself is left out, its error in (*errors)[i]
// (errors is resized to subgraphs' size, "" where compiled).
inline void compile_together_or_alone(
    const std::vector<FusedSubgraph>& subgraphs,
    const std::function<void(const std::vector<size_t>&, const std::vector<FusedSubgraph>&)>&
        build,
    std::vector<std::string>* errors) {
  errors->assign(subgraphs.size(), "");
  if (subgraphs.empty()) return;
  std::vector<size_t> all(subgraphs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  try {
    build(all, subgraphs);
  } catch (const Error&) {
    for (size_t i : all) {
      try {
        build({i}, {subgraphs[i]});
      } catch (const Error& e) {
        (*errors)[i] = e.what();
      }
    }
  }
}

// Device memory taken piece by piece and freed when this goes out of scope, without waiting
// for the work queued on it: the device's work is on one stream, so whatever reuses the memory
// runs after that work.
class DeviceScratch {
 public:
  explicit DeviceScratch(const DeviceBackend& device) : device_(device) {}
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    for (void* p : ptrs_) {
      try {
        device_.deallocate(p);
      } catch (...) {  // a device gone at exit: nothing more to free
      }
    }
  }
  // `bytes` of device memory (null for 0), named "<device>: <what>" in errors.
  void* take(int64_t bytes, const std::string& what) {
    ptrs_.reserve(ptrs_.size() + 1);  // so that push_back cannot throw after the allocation
    void* p = bytes > 0 ? device_.allocate(bytes, device_.name() + ": " + what) : nullptr;
    if (p != nullptr) ptrs_.push_back(p);
    return p;
  }

 private:
  const DeviceBackend& device_;
  std::vector<void*> ptrs_;
};

// The bytes of a value of type t.
inline int64_t bytes_of(const TensorType& t) {
  return num_elements(t.shape) * static_cast<int64_t>(dtype_size(t.dtype));
}

// compile() (executable.h) for `device`: the program CompileOptions::device (and
// outputs_on_device) describes, on any backend (the tests' emulated GPU among them). Throws
// kiln::Error, as compile() does.
Executable compile_for_device(const std::shared_ptr<const DeviceBackend>& device,
                              const Graph& graph, const std::vector<Tensor>& outputs,
                              const FeedList& feeds, const std::vector<Donation>& donations = {},
                              bool outputs_on_device = false);

}  // namespace kiln::compiler

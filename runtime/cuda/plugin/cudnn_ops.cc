// libkiln_cuda.so's convolutions and pooling (runtime/cuda/cuda_plugin.h's Conv and Pool)
// through cuDNN 9's convolution and pooling API, on NHWC values. cuDNN takes an NHWC kernel as KRSC ([k, r, s, c / groups]),
// Kiln's is HWIO ([r, s, c / groups, k], a [r s c/g, k] matrix): the forward and input-gradient
// passes transpose it into the scratch first, the kernel gradient writes KRSC there and
// transposes it out. Each geometry's algorithm is chosen once, by cuDNN's heuristic: the first
// it ranks that succeeds, fits kMaxWorkspace, and (for f32) does not round through TF32.
//
//
// Pooling: a maximum is cuDNN's deterministic max pooling with NaNs propagated; a sum is its
// average counting the padding, scaled by the window's size (so it may differ from the CPU's
// sum in the last bit). The max-pool gradient pools x into the scratch first (cuDNN's backward
// pass reads the pooled values); on ties cuDNN may pick another of the equal elements than the
// CPU's kernel, which takes the first in row-major window order, and a window whose maximum is
// NaN may pass no gradient (cuDNN matches x against y, and NaN equals nothing). The sum's
// gradient gives cuDNN the scratch (x's size) as the x it asks for and does not read.
//
// cuDNN 9 marks this API deprecated in favour of its graph API; it is still shipped and
// supported, and it does what Kiln needs here, so the warnings are silenced in this file alone.
#include <cudnn.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "runtime/cuda/plugin/plugin.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace kiln::runtime::cuda::plugin_impl {
namespace {

constexpr size_t kMaxWorkspace = size_t{1} << 30;
constexpr size_t kAlign = 256;

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// "cudnnFoo: <cuDNN's message>" for a failed call written `cudnnFoo(args)`.
std::string dnn_error(const char* call, cudnnStatus_t s) {
  const std::string c(call);
  return c.substr(0, c.find('(')) + ": " + cudnnGetErrorString(s);
}

#define KILN_DNN(call)                                            \
  do {                                                            \
    if (cudnnStatus_t st_ = (call); st_ != CUDNN_STATUS_SUCCESS)  \
      return dnn_error(#call, st_);                               \
  } while (0)

// One choice per geometry: the algorithm, its math type and cuDNN's scratch bytes.
struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t dnn_bytes = 0;
};

using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t>;

Key key_of(const plugin::Conv& a) {
  return {a.dtype, a.pass,  a.n,        a.h,        a.w,          a.c,
          a.k,     a.r,     a.s,        a.oh,       a.ow,         a.pad_h,
          a.pad_w, a.stride_h, a.stride_w, a.dilation_h, a.dilation_w, a.groups};
}

struct State {
  std::mutex mu;  // the handle is used by one call at a time
  cudnnHandle_t handle = nullptr;
  std::map<Key, Choice> chosen;
};

State& state() {
  static State* s = new State;  // never destroyed: the driver may be gone at exit
  return *s;
}

cudnnDataType_t dnn_type(int dtype) {
  switch (dtype) {
    case plugin::kF16: return CUDNN_DATA_HALF;
    case plugin::kBF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

size_t element_size(int dtype) { return dtype == plugin::kF32 ? 4 : 2; }

// The descriptors of one call.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descs() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

std::string check(const plugin::Conv& a) {
  if (a.dtype < plugin::kF32 || a.dtype > plugin::kBF16)
    return "dtype code " + std::to_string(a.dtype);
  if (a.pass < plugin::kConvForward || a.pass > plugin::kConvKernelGrad)
    return "pass code " + std::to_string(a.pass);
  for (int64_t v : {a.n, a.h, a.w, a.c, a.k, a.r, a.s, a.oh, a.ow, a.stride_h, a.stride_w,
                    a.dilation_h, a.dilation_w, a.groups})
    if (v <= 0 || v > INT_MAX) return "a size out of range (" + std::to_string(v) + ")";
  if (a.pad_h < 0 || a.pad_w < 0 || a.pad_h > INT_MAX || a.pad_w > INT_MAX)
    return "padding out of range";
  if (a.c % a.groups != 0 || a.k % a.groups != 0) return "channels not divisible by groups";
  return "";
}

std::string describe(const plugin::Conv& a, Descs& d) {
  const cudnnDataType_t t = dnn_type(a.dtype);
  const int n = static_cast<int>(a.n), c = static_cast<int>(a.c), k = static_cast<int>(a.k);
  KILN_DNN(cudnnCreateTensorDescriptor(&d.x));
  KILN_DNN(cudnnCreateTensorDescriptor(&d.y));
  KILN_DNN(cudnnCreateFilterDescriptor(&d.w));
  KILN_DNN(cudnnCreateConvolutionDescriptor(&d.conv));
  KILN_DNN(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, t, n, c, static_cast<int>(a.h),
                                      static_cast<int>(a.w)));
  KILN_DNN(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, t, n, k, static_cast<int>(a.oh),
                                      static_cast<int>(a.ow)));
  KILN_DNN(cudnnSetFilter4dDescriptor(d.w, t, CUDNN_TENSOR_NHWC, k,
                                      static_cast<int>(a.c / a.groups), static_cast<int>(a.r),
                                      static_cast<int>(a.s)));
  KILN_DNN(cudnnSetConvolution2dDescriptor(
      d.conv, static_cast<int>(a.pad_h), static_cast<int>(a.pad_w), static_cast<int>(a.stride_h),
      static_cast<int>(a.stride_w), static_cast<int>(a.dilation_h),
      static_cast<int>(a.dilation_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  KILN_DNN(cudnnSetConvolutionGroupCount(d.conv, static_cast<int>(a.groups)));
  KILN_DNN(cudnnSetConvolutionMathType(
      d.conv, a.dtype == plugin::kF32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  int on = 0, oc = 0, oh = 0, ow = 0;
  KILN_DNN(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &on, &oc, &oh, &ow));
  if (on != a.n || oc != a.k || oh != a.oh || ow != a.ow)
    return "cuDNN's output is [" + std::to_string(on) + ", " + std::to_string(oh) + ", " +
           std::to_string(ow) + ", " + std::to_string(oc) + "], Kiln's [" + std::to_string(a.n) +
           ", " + std::to_string(a.oh) + ", " + std::to_string(a.ow) + ", " +
           std::to_string(a.k) + "]";
  return "";
}

// The first of cuDNN's ranked results that ran, fits, keeps f32 in f32 (CUDNN_FMA_MATH alone:
// CUDNN_DEFAULT_MATH permits TF32 on Ampere and later) and is deterministic (some backward
// algorithms add with atomics, so their sums vary run to run); failing the last, the first
// that meets the others.
template <class Perf>
std::string pick(const Perf* perf, int count, int dtype, Choice* choice) {
  for (bool deterministic : {true, false}) {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kMaxWorkspace) continue;
      if (dtype == plugin::kF32 && perf[i].mathType != CUDNN_FMA_MATH) continue;
      if (deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
      choice->algo = static_cast<int>(perf[i].algo);
      choice->math = perf[i].mathType;
      choice->dnn_bytes = perf[i].memory;
      return "";
    }
  }
  return "cuDNN's heuristic offers no algorithm (of " + std::to_string(count) + ")";
}

std::string choose(State& s, const plugin::Conv& a, const Descs& d, Choice* choice) {
  int count = 0;
  switch (a.pass) {
    case plugin::kConvForward: {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      KILN_DNN(cudnnGetConvolutionForwardAlgorithm_v7(s.handle, d.x, d.w, d.conv, d.y,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count,
                                                      perf));
      return pick(perf, count, a.dtype, choice);
    }
    case plugin::kConvInputGrad: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      KILN_DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          s.handle, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
      return pick(perf, count, a.dtype, choice);
    }
    default: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      KILN_DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          s.handle, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
          perf));
      return pick(perf, count, a.dtype, choice);
    }
  }
}

// The geometry's choice (made now if new) with its descriptors; s.mu held.
std::string prepare(State& s, const plugin::Conv& a, Descs& d, Choice* choice) {
  if (std::string why = check(a); !why.empty()) return why;  // before touching the device
  if (s.handle == nullptr) KILN_DNN(cudnnCreate(&s.handle));
  if (std::string why = describe(a, d); !why.empty()) return why;
  const Key key = key_of(a);
  auto it = s.chosen.find(key);
  if (it == s.chosen.end()) {
    Choice c;
    if (std::string why = choose(s, a, d, &c); !why.empty()) return why;
    it = s.chosen.emplace(key, c).first;
  }
  *choice = it->second;
  return "";
}

size_t kernel_bytes(const plugin::Conv& a) {
  return static_cast<size_t>(a.r * a.s * (a.c / a.groups) * a.k) * element_size(a.dtype);
}

const char* pass_name(int pass) {
  return pass == plugin::kConvForward     ? "conv"
         : pass == plugin::kConvInputGrad ? "conv input grad"
                                          : "conv kernel grad";
}

std::string run(State& s, const plugin::Conv& a) {
  Descs d;
  Choice ch;
  if (std::string why = prepare(s, a, d, &ch); !why.empty()) return why;
  const size_t need = round_up(ch.dnn_bytes) + kernel_bytes(a);
  if (a.workspace_bytes < need || a.workspace == nullptr)
    return "scratch of " + std::to_string(a.workspace_bytes) + " bytes, needs " +
           std::to_string(need);
  KILN_DNN(cudnnSetStream(s.handle, static_cast<cudaStream_t>(a.stream)));
  KILN_DNN(cudnnSetConvolutionMathType(d.conv, ch.math));
  void* dnn_ws = ch.dnn_bytes > 0 ? a.workspace : nullptr;
  void* krsc = static_cast<char*>(a.workspace) + round_up(ch.dnn_bytes);
  const int64_t taps = a.r * a.s * (a.c / a.groups);  // the HWIO kernel is [taps, k]
  const float one = 1.0f, zero = 0.0f;
  switch (a.pass) {
    case plugin::kConvForward:
      if (std::string why = transpose(a.dtype, taps, a.k, a.w_ptr, krsc, a.stream); !why.empty())
        return why;
      KILN_DNN(cudnnConvolutionForward(s.handle, &one, d.x, a.x, d.w, krsc, d.conv,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(ch.algo), dnn_ws,
                                       ch.dnn_bytes, &zero, d.y, a.y));
      return "";
    case plugin::kConvInputGrad:
      if (std::string why = transpose(a.dtype, taps, a.k, a.w_ptr, krsc, a.stream); !why.empty())
        return why;
      KILN_DNN(cudnnConvolutionBackwardData(s.handle, &one, d.w, krsc, d.y, a.y, d.conv,
                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(ch.algo),
                                            dnn_ws, ch.dnn_bytes, &zero, d.x, a.x));
      return "";
    default:
      KILN_DNN(cudnnConvolutionBackwardFilter(
          s.handle, &one, d.x, a.x, d.y, a.y, d.conv,
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(ch.algo), dnn_ws, ch.dnn_bytes, &zero, d.w,
          krsc));
      return transpose(a.dtype, a.k, taps, krsc, a.w_ptr, a.stream);
  }
}

struct PoolDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  ~PoolDescs() {
    if (pool) cudnnDestroyPoolingDescriptor(pool);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

std::string run_pool(State& s, const plugin::Pool& a) {
  if (a.dtype < plugin::kF32 || a.dtype > plugin::kBF16)
    return "dtype code " + std::to_string(a.dtype);
  if (a.kind < plugin::kPoolMax || a.kind > plugin::kPoolSumGrad)
    return "kind code " + std::to_string(a.kind);
  for (int64_t v : {a.n, a.h, a.w, a.c, a.oh, a.ow, a.win_h, a.win_w, a.stride_h, a.stride_w})
    if (v <= 0 || v > INT_MAX) return "a size out of range (" + std::to_string(v) + ")";
  if (a.pad_h < 0 || a.pad_w < 0 || a.pad_h > INT_MAX || a.pad_w > INT_MAX)
    return "padding out of range";
  const bool max = a.kind == plugin::kPoolMax || a.kind == plugin::kPoolMaxGrad;
  const size_t y_bytes = static_cast<size_t>(a.n * a.oh * a.ow * a.c) * element_size(a.dtype);
  const size_t x_bytes = static_cast<size_t>(a.n * a.h * a.w * a.c) * element_size(a.dtype);
  const size_t need = a.kind == plugin::kPoolMaxGrad   ? y_bytes
                      : a.kind == plugin::kPoolSumGrad ? x_bytes
                                                       : 0;
  if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need))
    return "scratch of " + std::to_string(a.workspace_bytes) + " bytes, needs " +
           std::to_string(need);
  if (s.handle == nullptr) KILN_DNN(cudnnCreate(&s.handle));
  const cudnnDataType_t t = dnn_type(a.dtype);
  PoolDescs d;
  KILN_DNN(cudnnCreateTensorDescriptor(&d.x));
  KILN_DNN(cudnnCreateTensorDescriptor(&d.y));
  KILN_DNN(cudnnCreatePoolingDescriptor(&d.pool));
  const int n = static_cast<int>(a.n), c = static_cast<int>(a.c);
  KILN_DNN(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, t, n, c, static_cast<int>(a.h),
                                      static_cast<int>(a.w)));
  KILN_DNN(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, t, n, c, static_cast<int>(a.oh),
                                      static_cast<int>(a.ow)));
  KILN_DNN(cudnnSetPooling2dDescriptor(
      d.pool, max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
      CUDNN_PROPAGATE_NAN, static_cast<int>(a.win_h), static_cast<int>(a.win_w),
      static_cast<int>(a.pad_h), static_cast<int>(a.pad_w), static_cast<int>(a.stride_h),
      static_cast<int>(a.stride_w)));
  int on = 0, oc = 0, oh = 0, ow = 0;
  KILN_DNN(cudnnGetPooling2dForwardOutputDim(d.pool, d.x, &on, &oc, &oh, &ow));
  if (on != a.n || oc != a.c || oh != a.oh || ow != a.ow)
    return "cuDNN's output is [" + std::to_string(on) + ", " + std::to_string(oh) + ", " +
           std::to_string(ow) + ", " + std::to_string(oc) + "], Kiln's [" + std::to_string(a.n) +
           ", " + std::to_string(a.oh) + ", " + std::to_string(a.ow) + ", " +
           std::to_string(a.c) + "]";
  KILN_DNN(cudnnSetStream(s.handle, static_cast<cudaStream_t>(a.stream)));
  // A sum is the average (counting the padding) times the window's size.
  const float one = 1.0f, zero = 0.0f;
  const float scale = max ? 1.0f : static_cast<float>(a.win_h * a.win_w);
  switch (a.kind) {
    case plugin::kPoolMax:
    case plugin::kPoolSum:
      KILN_DNN(cudnnPoolingForward(s.handle, d.pool, &scale, d.x, a.x, &zero, d.y, a.y));
      return "";
    case plugin::kPoolMaxGrad:
      KILN_DNN(cudnnPoolingForward(s.handle, d.pool, &one, d.x, a.x, &zero, d.y, a.workspace));
      KILN_DNN(cudnnPoolingBackward(s.handle, d.pool, &one, d.y, a.workspace, d.y, a.dy, d.x,
                                    a.x, &zero, d.x, a.dx));
      return "";
    default:  // an average's gradient reads neither y nor x, but cuDNN asks for both: dy, and
              // the scratch (x's size) rather than dx, so that no input aliases the output
      KILN_DNN(cudnnPoolingBackward(s.handle, d.pool, &scale, d.y, a.dy, d.y, a.dy, d.x,
                                    a.workspace, &zero, d.x, a.dx));
      return "";
  }
}

}  // namespace

int pool(const plugin::Pool* a, char* err, size_t len) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (std::string why = run_pool(s, *a); !why.empty())
    return fail(err, len, std::string("pooling: ") + why);
  return 0;
}

int conv_workspace(const plugin::Conv* a, size_t* bytes, char* err, size_t len) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Descs d;
  Choice ch;
  if (std::string why = prepare(s, *a, d, &ch); !why.empty())
    return fail(err, len, std::string(pass_name(a->pass)) + ": " + why);
  *bytes = round_up(ch.dnn_bytes) + kernel_bytes(*a);
  return 0;
}

int conv(const plugin::Conv* a, char* err, size_t len) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (std::string why = run(s, *a); !why.empty())
    return fail(err, len, std::string(pass_name(a->pass)) + ": " + why);
  return 0;
}

int64_t conv_algorithms_chosen() {
  std::lock_guard<std::mutex> lock(state().mu);
  return static_cast<int64_t>(state().chosen.size());
}

}  // namespace kiln::runtime::cuda::plugin_impl

// oneDNN's f32 and bf16 convolutions behind ops/onednn_conv.h. The batch is cut into chunks of
// whole images that Kiln's thread pool runs on single-threaded primitives, so oneDNN's OpenMP team
// never competes with the pool for the cores; primitives are cached per shape, chunk size and
// fused epilogue (a bf16 forward's bias and activation).
#include "ops/onednn_conv.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/onednn_util.h"
#include "runtime/thread_pool.h"

namespace kiln::ops::onednn {
namespace {

using dnnl::memory;
using Dims = memory::dims;

enum class Pass { kForward, kInputGrad, kKernelGrad };

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("KILN_ONEDNN");
    return env == nullptr || std::string(env) != "0";
  }()};
  return on;
}

std::atomic<int64_t> g_forward{0}, g_input_grad{0}, g_kernel_grad{0}, g_fused_forward{0};

// KILN_ONEDNN_THREADING=omp runs each pass as one primitive over the whole batch on oneDNN's
// own OpenMP threads instead of chunks on Kiln's pool: kept to measure the two against each
// other (the pool won on 2 cores, see the commit that added this file).
bool omp_threading() {
  static const bool omp = [] {
    const char* env = std::getenv("KILN_ONEDNN_THREADING");
    return env != nullptr && std::string(env) == "omp";
  }();
  return omp;
}

std::string shape_text(const ConvShape& s) {
  auto dims = [](std::initializer_list<int64_t> v) {
    std::string t = "[";
    for (int64_t x : v) t += (t.size() > 1 ? "," : "") + std::to_string(x);
    return t + "]";
  };
  return "input " + dims({s.batch, s.in[0], s.in[1], s.c_in}) + ", kernel " +
         dims({s.kernel[0], s.kernel[1], s.c_in / s.groups, s.c_out}) + ", output " +
         dims({s.batch, s.out[0], s.out[1], s.c_out});
}

// The kernel's logical dimensions in oneDNN's order ([g,] o, i, h, w).
Dims weight_dims(const ConvShape& s) {
  const int64_t gi = s.c_in / s.groups, go = s.c_out / s.groups;
  if (s.groups == 1) return {s.c_out, s.c_in, s.kernel[0], s.kernel[1]};
  return {s.groups, go, gi, s.kernel[0], s.kernel[1]};
}

// Kiln's HWIO kernel as a oneDNN descriptor: element (h, w, i, g * go + o) lies at
// ((h * kw + w) * gi + i) * c_out + g * go + o.
memory::desc user_weights(const ConvShape& s, memory::data_type t) {
  const int64_t gi = s.c_in / s.groups, go = s.c_out / s.groups, kw = s.kernel[1];
  const int64_t i_stride = s.c_out, w_stride = gi * s.c_out, h_stride = kw * w_stride;
  if (s.groups == 1) {
    return memory::desc(weight_dims(s), t, Dims{1, i_stride, h_stride, w_stride});
  }
  return memory::desc(weight_dims(s), t, Dims{go, 1, i_stride, h_stride, w_stride});
}

memory::data_type data_type(const ConvShape& s) {
  return s.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
}

// The kernel gradient's type: f32 in both cases, so that the chunks' partial gradients are
// summed in f32 and a bf16 result is rounded once.
constexpr memory::data_type kGradType = memory::data_type::f32;

memory::desc images(int64_t n, int64_t c, const std::array<int64_t, 2>& hw, memory::data_type t) {
  return memory::desc({n, c, hw[0], hw[1]}, t, memory::format_tag::nhwc);
}

// The parts of a forward's BiasActivation that shape its primitive (not the bias's address).
struct Fused {
  bool bias = false;
  Activation activation = Activation::kNone;
};

// One pass of one shape at one chunk size: the primitive, the layout it wants the kernel (or
// gives the kernel gradient) in, and the reorder between that layout and Kiln's.
struct Entry {
  bool ok = false;  // false: oneDNN has no implementation, the caller's kernel runs
  dnnl::primitive prim;
  memory::desc src, dst, weights, scratch, bias;
  bool reorders = false;  // the kernel's layout differs from Kiln's
  dnnl::reorder reorder;
};

Entry make_entry(Pass pass, const ConvShape& s, int64_t n, const Fused& fused) {
  Entry e;
  const memory::data_type t = data_type(s);
  e.src = images(n, s.c_in, s.in, t);
  e.dst = images(n, s.c_out, s.out, t);
  if (fused.bias) e.bias = memory::desc({s.c_out}, t, memory::format_tag::x);
  const memory::desc any(weight_dims(s), t, memory::format_tag::any);
  const memory::desc any_grad(weight_dims(s), kGradType, memory::format_tag::any);
  const Dims strides = {s.strides[0], s.strides[1]};
  const Dims dilates = {s.dilation[0] - 1, s.dilation[1] - 1};  // oneDNN's 0 is dense
  const Dims low = {s.pad_low[0], s.pad_low[1]}, high = {s.pad_high[0], s.pad_high[1]};
  const auto direct = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per call: passes may run concurrently
  dnnl::primitive_attr forward_attr = attr;
  add_post_op(fused.activation, forward_attr);
  try {
    const auto training = dnnl::prop_kind::forward_training;
    const dnnl::convolution_forward::primitive_desc hint(
        fused.bias ? dnnl::convolution_forward::desc(training, direct, e.src, any, e.bias, e.dst,
                                                     strides, dilates, low, high)
                   : dnnl::convolution_forward::desc(training, direct, e.src, any, e.dst, strides,
                                                     dilates, low, high),
        forward_attr, cpu_engine());
    switch (pass) {
      case Pass::kForward:
        e.prim = dnnl::convolution_forward(hint);
        e.weights = hint.weights_desc();
        e.scratch = hint.scratchpad_desc();
        break;
      case Pass::kInputGrad: {
        const dnnl::convolution_backward_data::primitive_desc pd(
            {direct, e.src, any, e.dst, strides, dilates, low, high}, attr, cpu_engine(), hint);
        e.prim = dnnl::convolution_backward_data(pd);
        e.weights = pd.weights_desc();
        e.scratch = pd.scratchpad_desc();
        break;
      }
      case Pass::kKernelGrad: {
        const dnnl::convolution_backward_weights::primitive_desc pd(
            {direct, e.src, any_grad, e.dst, strides, dilates, low, high}, attr, cpu_engine(),
            hint);
        e.prim = dnnl::convolution_backward_weights(pd);
        e.weights = pd.diff_weights_desc();
        e.scratch = pd.scratchpad_desc();
        break;
      }
    }
    const bool to_user = pass == Pass::kKernelGrad;
    const memory::desc user = user_weights(s, to_user ? kGradType : t);
    e.reorders = e.weights != user;
    if (e.reorders) {
      e.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(
          cpu_engine(), to_user ? e.weights : user, cpu_engine(), to_user ? user : e.weights));
    }
    e.ok = true;
  } catch (const dnnl::error&) {
    e.ok = false;  // unimplemented here (or invalid): Kiln's own kernel serves it
  }
  return e;
}

// The entry for (pass, shape, chunk of n images, threads, fused epilogue), made on first use. A
// training step repeats its shapes every step; the bound only keeps a process that sweeps shapes
// finite.
std::shared_ptr<const Entry> entry(Pass pass, const ConvShape& s, int64_t n, int threads,
                                   const Fused& fused) {
  static std::mutex mu;
  static std::map<std::vector<int64_t>, std::shared_ptr<const Entry>> cache;
  constexpr size_t kMaxEntries = 256;
  std::vector<int64_t> key = {static_cast<int64_t>(pass),
                              n,
                              threads,
                              s.c_in,
                              s.c_out,
                              s.groups,
                              s.bf16,
                              fused.bias,
                              static_cast<int64_t>(fused.activation)};
  for (const auto* a :
       {&s.in, &s.kernel, &s.out, &s.strides, &s.pad_low, &s.pad_high, &s.dilation}) {
    key.insert(key.end(), a->begin(), a->end());
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  OmpThreads omp(threads);  // made outside the lock: creating a primitive takes milliseconds
  auto made = std::make_shared<const Entry>(make_entry(pass, s, n, fused));
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxEntries) cache.clear();
  return cache.emplace(std::move(key), std::move(made)).first->second;
}

// A thread's scratch memory, kept between calls so that a step allocates nothing.
void* scratch_for(const memory::desc& d) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < d.get_size()) buffer.resize(d.get_size());
  return buffer.data();
}

memory bind(const memory::desc& d, const void* p) {
  return memory(d, cpu_engine(), const_cast<void*>(p));
}

// How a pass splits the batch: chunks of `images` images (the last one may be shorter), run by
// `threads`-thread primitives. Chunks depend on the shapes only, so results do not depend on the
// thread count.
struct Split {
  int64_t images, chunks, threads;
  int64_t size(int64_t c, int64_t batch) const { return std::min(images, batch - c * images); }
};

Split split(const ConvShape& s, int64_t images) {
  if (omp_threading()) return {s.batch, 1, runtime::ThreadPool::global().num_threads()};
  images = std::clamp<int64_t>(images, 1, s.batch);
  return {images, (s.batch + images - 1) / images, 1};
}

// Enough images per chunk to amortise a primitive call, few enough that the chunk's output is
// still in cache when the epilogue reads it.
int64_t images_for_bytes(int64_t bytes_per_image) {
  return (int64_t{512} << 10) / std::max<int64_t>(bytes_per_image, 1);
}

// Calls f(chunk index, first image, images) for every chunk: spread over the pool with
// single-threaded primitives, or inline (one chunk on oneDNN's threads).
template <class F>
void for_chunks(const ConvShape& s, const Split& sp, F&& f) {
  if (sp.chunks == 1) {
    OmpThreads omp(static_cast<int>(sp.threads));
    f(0, 0, s.batch);
    return;
  }
  runtime::parallel_for(sp.chunks, 1, [&](int64_t begin, int64_t end) {
    OmpThreads omp(1);
    for (int64_t c = begin; c < end; ++c) f(c, c * sp.images, sp.size(c, s.batch));
  });
}

// The entries for a split's full and last chunk; null when oneDNN declines either.
struct Entries {
  std::shared_ptr<const Entry> full, last;
  const Entry& of(int64_t images, const Split& sp) const {
    return images == sp.images ? *full : *last;
  }
};

std::optional<Entries> entries(Pass pass, const ConvShape& s, const Split& sp,
                               const Fused& fused = {}) {
  const int threads = static_cast<int>(sp.threads);
  Entries es{entry(pass, s, sp.images, threads, fused), nullptr};
  const int64_t tail = sp.size(sp.chunks - 1, s.batch);
  es.last = tail == sp.images ? es.full : entry(pass, s, tail, threads, fused);
  if (!es.full->ok || !es.last->ok) return std::nullopt;
  return es;
}

// The kernel in the layout of e's primitive: `w` itself, or reordered into `storage`.
const void* kernel_for(const Entry& e, const void* w, std::vector<char>& storage,
                       const ConvShape& s, int threads) {
  if (!e.reorders) return w;
  storage.resize(e.weights.get_size());
  OmpThreads omp(threads);
  dnnl::stream stream(cpu_engine());
  e.reorder.execute(stream, {{DNNL_ARG_FROM, bind(user_weights(s, data_type(s)), w)},
                             {DNNL_ARG_TO, bind(e.weights, storage.data())}});
  return storage.data();
}

// The kernel in the layout of each chunk primitive (the last chunk's may differ from the rest).
// Not copyable: `full` and `last` may point into the storage (a move keeps the buffers).
struct ChunkKernels {
  ChunkKernels() = default;
  ChunkKernels(ChunkKernels&&) = default;
  ChunkKernels(const ChunkKernels&) = delete;
  std::vector<char> full_storage, last_storage;  // the reordered kernels, when reordered
  const void* full = nullptr;
  const void* last = nullptr;
  const void* of(int64_t images, const Split& sp) const {
    return images == sp.images ? full : last;
  }
};

ChunkKernels chunk_kernels(const Entries& es, const void* w, const ConvShape& s, const Split& sp) {
  const int threads = static_cast<int>(sp.threads);
  ChunkKernels k;
  k.full = kernel_for(*es.full, w, k.full_storage, s, threads);
  k.last = es.last == es.full ? k.full : kernel_for(*es.last, w, k.last_storage, s, threads);
  return k;
}

// Byte offsets of whole images.
const char* at(const void* p, int64_t elements, const ConvShape& s) {
  return static_cast<const char*>(p) + elements * (s.bf16 ? 2 : 4);
}
char* at(void* p, int64_t elements, const ConvShape& s) {
  return static_cast<char*>(p) + elements * (s.bf16 ? 2 : 4);
}

bool usable(const ConvShape& s, const Epilogue& epilogue = nullptr) {
  if (s.bf16 && epilogue) return false;  // epilogues see f32 rows
  if (!enabled() || s.batch <= 0 || s.c_in <= 0 || s.c_out <= 0 || s.groups <= 0) return false;
  for (int i = 0; i < 2; ++i) {
    if (s.in[i] <= 0 || s.kernel[i] <= 0 || s.out[i] <= 0) return false;
  }
  return true;
}

// Kiln's kernels multiply the zeros of the padding like any input (0 * inf = NaN, as the
// padded input's convolution does); oneDNN skips those taps. The two differ only where the
// operand meeting the padding (the kernel in the forward, the output gradient in the kernel
// gradient) holds an inf or NaN, so a padded convolution with one goes to Kiln's kernel.
bool padded(const ConvShape& s) {
  return s.pad_low[0] + s.pad_low[1] + s.pad_high[0] + s.pad_high[1] > 0;
}

bool all_finite(const void* p, int64_t n, bool bf16) {
  std::atomic<bool> finite{true};
  runtime::parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    bool ok = true;
    if (bf16) {
      const auto* v = static_cast<const bfloat16*>(p);
      for (int64_t i = b; i < e; ++i) ok &= std::isfinite(static_cast<float>(v[i]));
    } else {
      const auto* v = static_cast<const float*>(p);
      for (int64_t i = b; i < e; ++i) ok &= std::isfinite(v[i]);
    }
    if (!ok) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

// Runs `body`, turning oneDNN's errors into the kernel's kiln::Error.
template <class F>
void guarded(const KernelContext& ctx, const char* pass, const ConvShape& s, F&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    ctx.fail(std::string("oneDNN failed in the ") + pass + ": " + e.what() + " (" + shape_text(s) +
             ")");
  }
}

}  // namespace

bool built() { return true; }
bool enabled() { return enabled_flag().load(std::memory_order_relaxed); }
void set_enabled(bool on) { enabled_flag().store(on); }

Counts counts() {
  return {g_forward.load(), g_input_grad.load(), g_kernel_grad.load(), g_fused_forward.load()};
}

namespace {

// The forward pass: `epilogue` (f32) called on each chunk as soon as oneDNN wrote it, or (bf16)
// `fused`'s bias and activation inside oneDNN's kernel, its relu on each chunk right after.
bool run_forward(const KernelContext& ctx, const ConvShape& s, const void* x, const void* w,
                 void* y, const Epilogue& epilogue, const BiasActivation* fused) {
  const int64_t n_w = s.kernel[0] * s.kernel[1] * (s.c_in / s.groups) * s.c_out;
  if (padded(s) && !all_finite(w, n_w, s.bf16)) return false;
  const int64_t in_image = s.in[0] * s.in[1] * s.c_in, out_rows = s.out[0] * s.out[1];
  const int64_t out_image = out_rows * s.c_out;
  const Split sp = split(s, images_for_bytes(out_image * 4));  // the f32 epilogue's rows
  const Fused kind = fused ? Fused{fused->bias != nullptr, fused->activation} : Fused{};
  const bool relu = kind.activation == Activation::kRelu;
  bool ran = false;
  guarded(ctx, "convolution", s, [&] {
    const std::optional<Entries> es = entries(Pass::kForward, s, sp, kind);
    if (!es) return;
    const ChunkKernels kernels = chunk_kernels(*es, w, s, sp);
    for_chunks(s, sp, [&](int64_t, int64_t first, int64_t n) {
      const Entry& e = es->of(n, sp);
      void* out = at(y, first * out_image, s);
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, bind(e.src, at(x, first * in_image, s))},
          {DNNL_ARG_WEIGHTS, bind(e.weights, kernels.of(n, sp))},
          {DNNL_ARG_DST, bind(e.dst, out)},
          {DNNL_ARG_SCRATCHPAD, bind(e.scratch, scratch_for(e.scratch))}};
      if (kind.bias) args.emplace(DNNL_ARG_BIAS, bind(e.bias, fused->bias));
      dnnl::stream stream(cpu_engine());
      e.prim.execute(stream, args);
      if (sp.chunks == 1) return;
      if (epilogue) epilogue(static_cast<float*>(out), first * out_rows, n * out_rows);
      if (relu) relu_keeping_nan(out, n * out_image, true);  // still in cache
    });
    if (sp.chunks == 1 && (epilogue || relu)) {  // one chunk on oneDNN's threads: a pass
      const int64_t rows = s.batch * out_rows;
      runtime::parallel_for(rows, std::max<int64_t>(1, (1 << 14) / s.c_out),
                            [&](int64_t b, int64_t end) {
                              if (epilogue) {
                                epilogue(static_cast<float*>(y) + b * s.c_out, b, end - b);
                              } else {
                                relu_keeping_nan(at(y, b * s.c_out, s), (end - b) * s.c_out, true);
                              }
                            });
    }
    ran = true;
  });
  if (ran) g_forward.fetch_add(1);
  if (ran && fused) g_fused_forward.fetch_add(1);
  return ran;
}

}  // namespace

bool forward(const KernelContext& ctx, const ConvShape& s, const void* x, const void* w, void* y,
             const Epilogue& epilogue) {
  if (!usable(s, epilogue)) return false;
  return run_forward(ctx, s, x, w, y, epilogue, nullptr);
}

bool fused_forward(const KernelContext& ctx, const ConvShape& s, const void* x, const void* w,
                   void* y, const BiasActivation& fused) {
  if (!s.bf16 || !has_bf16_unit() || !usable(s)) return false;
  return run_forward(ctx, s, x, w, y, nullptr, &fused);
}

bool input_grad(const KernelContext& ctx, const ConvShape& s, const void* dy, const void* w,
                void* dx) {
  if (!usable(s)) return false;
  const int64_t in_image = s.in[0] * s.in[1] * s.c_in;
  const int64_t out_image = s.out[0] * s.out[1] * s.c_out;
  const Split sp = split(s, images_for_bytes(std::max(in_image, out_image) * 4));
  bool ran = false;
  guarded(ctx, "convolution_input_grad", s, [&] {
    const std::optional<Entries> es = entries(Pass::kInputGrad, s, sp);
    if (!es) return;
    const ChunkKernels kernels = chunk_kernels(*es, w, s, sp);
    for_chunks(s, sp, [&](int64_t, int64_t first, int64_t n) {
      const Entry& e = es->of(n, sp);
      dnnl::stream stream(cpu_engine());
      e.prim.execute(stream, {{DNNL_ARG_DIFF_SRC, bind(e.src, at(dx, first * in_image, s))},
                              {DNNL_ARG_WEIGHTS, bind(e.weights, kernels.of(n, sp))},
                              {DNNL_ARG_DIFF_DST, bind(e.dst, at(dy, first * out_image, s))},
                              {DNNL_ARG_SCRATCHPAD, bind(e.scratch, scratch_for(e.scratch))}});
    });
    ran = true;
  });
  if (ran) g_input_grad.fetch_add(1);
  return ran;
}

bool kernel_grad(const KernelContext& ctx, const ConvShape& s, const void* x, const void* dy,
                 void* dw) {
  if (!usable(s)) return false;
  if (padded(s) && !all_finite(dy, s.batch * s.out[0] * s.out[1] * s.c_out, s.bf16)) return false;
  const int64_t in_image = s.in[0] * s.in[1] * s.c_in;
  const int64_t out_image = s.out[0] * s.out[1] * s.c_out;
  const int64_t n_w = s.kernel[0] * s.kernel[1] * (s.c_in / s.groups) * s.c_out;
  // At most 8 chunks, each summed into its own partial gradient; the partials are added in
  // chunk order.
  const Split sp = split(s, (s.batch + 7) / 8);
  bool ran = false;
  guarded(ctx, "convolution_kernel_grad", s, [&] {
    const std::optional<Entries> es = entries(Pass::kKernelGrad, s, sp);
    if (!es) return;
    // Straight into dw when one f32 chunk makes it.
    const bool direct = sp.chunks == 1 && !s.bf16;
    std::vector<float> partials(direct ? 0 : sp.chunks * n_w);
    const memory::desc user = user_weights(s, kGradType);
    for_chunks(s, sp, [&](int64_t c, int64_t first, int64_t n) {
      const Entry& e = es->of(n, sp);
      float* mine = direct ? static_cast<float*>(dw) : partials.data() + c * n_w;
      thread_local std::vector<float> blocked;
      if (e.reorders) blocked.resize(e.weights.get_size() / sizeof(float));
      float* target = e.reorders ? blocked.data() : mine;
      dnnl::stream stream(cpu_engine());
      e.prim.execute(stream, {{DNNL_ARG_SRC, bind(e.src, at(x, first * in_image, s))},
                              {DNNL_ARG_DIFF_DST, bind(e.dst, at(dy, first * out_image, s))},
                              {DNNL_ARG_DIFF_WEIGHTS, bind(e.weights, target)},
                              {DNNL_ARG_SCRATCHPAD, bind(e.scratch, scratch_for(e.scratch))}});
      if (e.reorders) {
        e.reorder.execute(
            stream, {{DNNL_ARG_FROM, bind(e.weights, target)}, {DNNL_ARG_TO, bind(user, mine)}});
      }
    });
    if (!direct) {
      runtime::parallel_for(n_w, 1 << 12, [&](int64_t b, int64_t end) {
        for (int64_t i = b; i < end; ++i) {
          float total = partials[i];
          for (int64_t c = 1; c < sp.chunks; ++c) total += partials[c * n_w + i];
          if (s.bf16) {
            static_cast<bfloat16*>(dw)[i] = bfloat16(total);
          } else {
            static_cast<float*>(dw)[i] = total;
          }
        }
      });
    }
    ran = true;
  });
  if (ran) g_kernel_grad.fetch_add(1);
  return ran;
}

}  // namespace kiln::ops::onednn

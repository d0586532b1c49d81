// The direct few-input-channel convolution kernels (ops/conv_direct.h). Built for each x86-64
// level (KILN_DISPATCHED_SOURCES: -ffp-contract=off, so every level multiplies and adds apart and
// gives the same bits). The output channels are held in vectors of 16 floats (GCC's vector
// extensions: one AVX-512 register, two AVX2 ones); NV of them cover c_out, the lanes past it
// multiplying zero weights.
// GCC notes that V's ABI differs between the levels; V never crosses a call (all inlined).
#pragma GCC diagnostic ignored "-Wpsabi"
#include "ops/conv_direct.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "src/core/cpu_isa.h"

namespace kiln::ops::direct_conv {

namespace {

typedef float V __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
// What one image's dy may take for the kernel gradient to read it several times from cache.
constexpr int64_t kCachedBytes = int64_t{256} << 10;

std::atomic<int64_t> g_forward_pool{0}, g_pool_kernel_grad{0};

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> flag([] {
    const char* env = std::getenv("KILN_DIRECT_CONV");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }());
  return flag;
}

inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// One image's input, zero-padded so that every tap of every output pixel reads inside it: rows
// of `width` pixels of c_in channels. The input itself where no padding is needed.
struct Source {
  const float* data;
  int64_t width;
};

// The padded image's rows and columns.
int64_t padded_rows(const Geometry& g) {
  return std::max(g.in_h + g.pad_top, (g.out_h - 1) * g.stride_h + (g.k_h - 1) * g.dil_h + 1);
}
int64_t padded_cols(const Geometry& g) {
  return std::max(g.in_w + g.pad_left, (g.out_w - 1) * g.stride_w + (g.k_w - 1) * g.dil_w + 1);
}

// A thread's scratch buffer kept between calls, unless a large image left it large.
template <class T>
void release_if_large(std::vector<T>& buffer) {
  if (buffer.capacity() * sizeof(T) > (size_t{16} << 20)) std::vector<T>().swap(buffer);
}

Source padded_image(const Geometry& g, const float* image, std::vector<float>& buffer) {
  const int64_t rows = padded_rows(g), cols = padded_cols(g);
  if (g.pad_top == 0 && g.pad_left == 0 && rows == g.in_h && cols == g.in_w) return {image, cols};
  buffer.assign(static_cast<size_t>(rows * cols * g.c_in), 0.0f);
  const int64_t line = g.in_w * g.c_in;
  for (int64_t r = 0; r < g.in_h; ++r) {
    std::memcpy(buffer.data() + ((r + g.pad_top) * cols + g.pad_left) * g.c_in,
                image + r * line, sizeof(float) * line);
  }
  return {buffer.data(), cols};
}

// Each tap's offset from its output pixel's first input element, in kernel order (row, column,
// channel), padded with `dummies` taps at offset 0 (read, and their results dropped).
std::vector<int64_t> tap_offsets(const Geometry& g, int64_t width, int64_t dummies) {
  std::vector<int64_t> off;
  for (int64_t i = 0; i < g.k_h; ++i)
    for (int64_t j = 0; j < g.k_w; ++j)
      for (int64_t ci = 0; ci < g.c_in; ++ci)
        off.push_back((i * g.dil_h * width + j * g.dil_w) * g.c_in + ci);
  off.insert(off.end(), static_cast<size_t>(dummies), 0);
  return off;
}

// The sums of P output pixels (their first input elements at bases[p]) x all c_out channels:
// acc[p] = sum from +0 over the taps of input x kernel, the P x NV sums in registers.
template <int NV, int P>
inline void sum_pixels(const float* const* bases, const int64_t* off, int64_t taps,
                       const float* w, V (&acc)[P][NV]) {
  for (int p = 0; p < P; ++p)
    for (int v = 0; v < NV; ++v) acc[p][v] = V{};
  for (int64_t t = 0; t < taps; ++t) {
    V wv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) wv[v] = load(w + (t * NV + v) * kLanes);
#pragma GCC unroll 9
    for (int p = 0; p < P; ++p) {
      const float s = bases[p][off[t]];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[p][v] += s * wv[v];
    }
  }
}

// P output pixels of one row (`step` input elements apart, from `base`), stored at y.
template <int NV, int P>
inline void forward_pixels(const float* base, int64_t step, const int64_t* off, int64_t taps,
                           const float* w, float* y, int64_t c_out) {
  const float* bases[P];
  for (int p = 0; p < P; ++p) bases[p] = base + p * step;
  V acc[P][NV];
  sum_pixels<NV, P>(bases, off, taps, w, acc);
  if (c_out == NV * kLanes) {  // whole vectors: no call to memcpy with a run-time size
    for (int p = 0; p < P; ++p) std::memcpy(y + p * c_out, acc[p], sizeof(acc[p]));
  } else {
    for (int p = 0; p < P; ++p) std::memcpy(y + p * c_out, acc[p], sizeof(float) * c_out);
  }
}

// Pixels per block: enough independent sums (P x NV) to cover the adds' latency.
template <int NV>
constexpr int kPixels = NV == 1 ? 8 : NV == 2 ? 4 : 2;

template <int NV>
void forward_rows(const Geometry& g, Source src, const int64_t* off, const float* w, float* y,
                  int64_t oy0, int64_t oy1) {
  constexpr int P = kPixels<NV>;
  const int64_t step = g.stride_w * g.c_in, taps = g.taps();
  for (int64_t oy = oy0; oy < oy1; ++oy) {
    const float* row = src.data + oy * g.stride_h * src.width * g.c_in;
    float* out = y + oy * g.out_w * g.c_out;
    int64_t ox = 0;
    for (; ox + P <= g.out_w; ox += P)
      forward_pixels<NV, P>(row + ox * step, step, off, taps, w, out + ox * g.c_out, g.c_out);
    for (; ox < g.out_w; ++ox)
      forward_pixels<NV, 1>(row + ox * step, step, off, taps, w, out + ox * g.c_out, g.c_out);
  }
}

// Taps per pass of the kernel gradient: TB x NV sums stay in registers over an image's pixels.
template <int NV>
constexpr int kTapBlock = NV <= 2 ? 9 : NV == 3 ? 6 : 4;

// dw += one image's kernel gradient; dy's pixels are NV * kLanes floats apart (zero-padded past
// c_out where c_out is narrower).
template <int NV>
void grad_image(const Geometry& g, Source src, const int64_t* off, const float* dy, float* dw) {
  constexpr int TB = kTapBlock<NV>;
  const int64_t taps = g.taps(), blocks = (taps + TB - 1) / TB;
  for (int64_t tb = 0; tb < blocks; ++tb) {
    const int64_t* o = off + tb * TB;
    V acc[TB][NV] = {};
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      const float* row = src.data + oy * g.stride_h * src.width * g.c_in;
      const float* d = dy + oy * g.out_w * NV * kLanes;
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        const float* base = row + ox * g.stride_w * g.c_in;
        V dv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) dv[v] = load(d + (ox * NV + v) * kLanes);
#pragma GCC unroll 9
        for (int t = 0; t < TB; ++t) {
          const float s = base[o[t]];
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[t][v] += s * dv[v];
        }
      }
    }
    for (int64_t t = 0; t < TB && tb * TB + t < taps; ++t) {
      float sums[NV * kLanes];
      std::memcpy(sums, acc[t], sizeof(sums));
      float* out = dw + (tb * TB + t) * g.c_out;
      for (int64_t c = 0; c < g.c_out; ++c) out[c] += sums[c];
    }
  }
}

// One pool window's epilogue, on e [4][W] (its pixels' sums, W = NV * kLanes channels): the
// bias and relu, then the maximum into m and its tap into tk, in plain loops over the lanes
// (GCC's vectorizer turns their conditionals into masks; ?: on vector types it takes apart).
// The same expressions as the epilogue's and pool_windows' (compiler/cpu/fused_conv.cc).
template <int W>
inline void window_epilogue(float (&e)[4][W], const float* __restrict bias, bool relu,
                            float (&m)[W], int32_t (&tk)[W], bool want_taps) {
  for (int t = 0; t < 4; ++t) {
    if (bias != nullptr)
      for (int k = 0; k < W; ++k) e[t][k] = e[t][k] + bias[k];
    if (relu)
      for (int k = 0; k < W; ++k) e[t][k] = e[t][k] <= 0.0f ? 0.0f : e[t][k];
  }
  for (int k = 0; k < W; ++k) m[k] = e[0][k];
  for (int t = 1; t < 4; ++t) {
    for (int k = 0; k < W; ++k) {
      const float v = e[t][k], w = m[k];
      m[k] = (v > w) | ((v != v) & (w == w)) ? v : w;  // the first NaN, else the first greatest
    }
  }
  if (!want_taps) return;
  for (int k = 0; k < W; ++k) tk[k] = 0;
  for (int t = 3; t >= 0; --t) {
    for (int k = 0; k < W; ++k) {
      const float v = e[t][k], w = m[k];
      tk[k] = (v == w) | ((v != v) & (w != w)) ? t : tk[k];
    }
  }
  for (int k = 0; k < W; ++k) tk[k] |= m[k] <= 0.0f ? int32_t{kNonPositive} : 0;
}

// The 2 x 2 pool windows of one image: each window's four pixels summed together, then the bias,
// relu, the maximum and its tap, as the epilogue and pool_image (compiler/cpu/fused_conv.cc)
// compute them one after another. bias: NV * kLanes values, or null.
template <int NV>
void forward_pool_image(const Geometry& g, Source src, const int64_t* off, const float* w,
                        const float* bias, bool relu, float* pooled, uint8_t* taps) {
  constexpr int W = NV * kLanes;
  const int64_t ph = g.out_h / 2, pw = g.out_w / 2, taps_n = g.taps(), c = g.c_out;
  const int64_t row = g.stride_h * src.width * g.c_in, col = g.stride_w * g.c_in;
  for (int64_t py = 0; py < ph; ++py) {
    for (int64_t px = 0; px < pw; ++px) {
      const float* corner = src.data + 2 * py * row + 2 * px * col;
      const float* bases[4] = {corner, corner + col, corner + row, corner + row + col};
      V acc[4][NV];
      sum_pixels<NV, 4>(bases, off, taps_n, w, acc);
      float e[4][W], m[W];
      int32_t tk[W];
      std::memcpy(e, acc, sizeof(e));
      window_epilogue<W>(e, bias, relu, m, tk, taps != nullptr);
      const int64_t at = (py * pw + px) * c;
      if (c == W) {
        std::memcpy(pooled + at, m, sizeof(m));
      } else {
        std::memcpy(pooled + at, m, sizeof(float) * c);
      }
      if (taps == nullptr) continue;
      uint8_t* __restrict out = taps + at;
      for (int64_t k = 0; k < c; ++k) out[k] = static_cast<uint8_t>(tk[k]);
    }
  }
}

// dw += one image's kernel gradient, db += its bias gradient, through forward_pool_image's pool:
// each window's dz formed from its taps on the stack. dp and taps have NV * kLanes channels
// (zero-padded past c_out where c_out is narrower).
template <int NV>
void pool_grad_image(const Geometry& g, Source src, const int64_t* off, const uint8_t* taps,
                     const float* dp, uint8_t keep, float* dw, float* db) {
  constexpr int TB = kTapBlock<NV>;
  constexpr int W = NV * kLanes;
  const int64_t ph = g.out_h / 2, pw = g.out_w / 2, taps_n = g.taps();
  const int64_t blocks = (taps_n + TB - 1) / TB;
  const int64_t row = g.stride_h * src.width * g.c_in, col = g.stride_w * g.c_in;
  const int32_t mask = keep;
  for (int64_t tb = 0; tb < blocks; ++tb) {
    const int64_t* o = off + tb * TB;
    V acc[TB][NV] = {};
    float bias[W] = {};  // db's sums go on from db itself, window by window
    if (tb == 0) std::copy_n(db, g.c_out, bias);
    for (int64_t py = 0; py < ph; ++py) {
      for (int64_t px = 0; px < pw; ++px) {
        const int64_t at = (py * pw + px) * W;
        const float* __restrict gp = dp + at;
        const uint8_t* __restrict tp = taps + at;
        int32_t tk[W];
        float dz[4][W];
        for (int k = 0; k < W; ++k) tk[k] = tp[k] & mask;
        if (tb == 0)
          for (int k = 0; k < W; ++k) bias[k] += (tk[k] & kNonPositive) != 0 ? 0.0f : gp[k];
        for (int t = 0; t < 4; ++t)
          for (int k = 0; k < W; ++k) dz[t][k] = tk[k] == t ? gp[k] : 0.0f;
        V dv[4][NV];
        std::memcpy(dv, dz, sizeof(dv));
        const float* corner = src.data + 2 * py * row + 2 * px * col;
        const float* bases[4] = {corner, corner + col, corner + row, corner + row + col};
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
#pragma GCC unroll 9
          for (int j = 0; j < TB; ++j) {
            const float s = bases[t][o[j]];
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[j][v] += s * dv[t][v];
          }
        }
      }
    }
    // The rows and columns the pool dropped: dz is 0 there (input x 0, kept for NaN and inf).
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      for (int64_t ox = oy < 2 * ph ? 2 * pw : 0; ox < g.out_w; ++ox) {
        const float* base = src.data + oy * row + ox * col;
        for (int j = 0; j < TB; ++j) {
          const float s = base[o[j]];
          for (int v = 0; v < NV; ++v) acc[j][v] += s * V{};
        }
      }
    }
    for (int64_t j = 0; j < TB && tb * TB + j < taps_n; ++j) {
      float sums[W];
      std::memcpy(sums, acc[j], sizeof(sums));
      float* out = dw + (tb * TB + j) * g.c_out;
      for (int64_t c = 0; c < g.c_out; ++c) out[c] += sums[c];
    }
    if (tb == 0) std::copy_n(bias, g.c_out, db);
  }
}

int64_t vectors(const Geometry& g) { return (g.c_out + kLanes - 1) / kLanes; }

// f(std::integral_constant<int, NV>) for g's NV.
template <class F>
void with_vectors(const Geometry& g, const F& f) {
  switch (vectors(g)) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, 4>{});
  }
}

// Taps per pass of g's kernel gradients (kTapBlock of its NV).
int64_t tap_block(const Geometry& g) {
  int64_t block = 0;
  with_vectors(g, [&](auto nv_c) { block = kTapBlock<decltype(nv_c)::value>; });
  return block;
}

// The kernel as [taps][NV * kLanes], zero past c_out.
std::vector<float> packed_kernel(const Geometry& g, const float* w) {
  const int64_t wide = vectors(g) * kLanes, n = g.taps();
  std::vector<float> packed(static_cast<size_t>(n * wide), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    std::memcpy(packed.data() + t * wide, w + t * g.c_out, sizeof(float) * g.c_out);
  return packed;
}

}  // namespace

bool enabled() { return enabled_flag().load(std::memory_order_relaxed); }
void set_enabled(bool on) { enabled_flag().store(on); }

Counts counts() {
  return {g_forward_pool.load(), g_pool_kernel_grad.load()};
}

bool serves(const Geometry& g) {
  if (!enabled() || g.c_in < 1 || g.c_in > kMaxInChannels || g.c_out < 1 ||
      g.c_out > kMaxOutChannels || g.out_h <= 0 || g.out_w <= 0)
    return false;
  // Mostly padding (a large padding with a large stride): the padded copy would be far larger
  // than the image.
  if (padded_rows(g) * padded_cols(g) > 4 * g.in_h * g.in_w + 4096) return false;
  // The kernel gradient reads an image's dy once per block of taps: more than one block (a
  // large kernel, or wide outputs) only while that dy stays in cache, or it streams from memory
  // each time (a 7 x 7 x 3 kernel over a 112 x 112 x 64 output would read 3 MB 37 times).
  const int64_t block = tap_block(g);
  const int64_t dy_bytes = g.out_h * g.out_w * vectors(g) * kLanes * int64_t{sizeof(float)};
  return g.taps() <= block || dy_bytes <= kCachedBytes;
}

void forward(const Geometry& g, const float* x, const float* w, float* y, int64_t oy0,
             int64_t oy1) {
  const std::vector<float> packed = packed_kernel(g, w);
  thread_local std::vector<float> buffer;
  const Source src = padded_image(g, x, buffer);
  const std::vector<int64_t> off = tap_offsets(g, src.width, 0);
  cpu::dispatch([&] {
    with_vectors(g, [&](auto nv_c) {
      forward_rows<decltype(nv_c)::value>(g, src, off.data(), packed.data(), y, oy0, oy1);
    });
  });
  release_if_large(buffer);
}

void kernel_grad_add(const Geometry& g, const float* x, const float* dy, float* dw, int64_t b0,
                     int64_t b1) {
  const int64_t nv = vectors(g), taps = g.taps(), pixels = g.out_h * g.out_w;
  const int64_t block = tap_block(g);
  thread_local std::vector<float> buffer, wide;
  const int64_t image = g.in_h * g.in_w * g.c_in;
  for (int64_t b = b0; b < b1; ++b) {
    const Source src = padded_image(g, x + b * image, buffer);
    const std::vector<int64_t> off = tap_offsets(g, src.width, (block - taps % block) % block);
    const float* d = dy + b * pixels * g.c_out;
    if (g.c_out != nv * kLanes) {  // each pixel's gradients widened to nv vectors
      wide.assign(static_cast<size_t>(pixels * nv * kLanes), 0.0f);
      for (int64_t p = 0; p < pixels; ++p)
        std::memcpy(wide.data() + p * nv * kLanes, d + p * g.c_out, sizeof(float) * g.c_out);
      d = wide.data();
    }
    cpu::dispatch([&] {
      with_vectors(g, [&](auto nv_c) {
        grad_image<decltype(nv_c)::value>(g, src, off.data(), d, dw);
      });
    });
  }
  release_if_large(buffer);
  release_if_large(wide);
}

bool serves_pool(const Geometry& g, const PoolEpilogue& p) {
  return serves(g) && takes_pool(g.c_in, g.c_out, p.pool_h, p.pool_w) && g.out_h >= 2 &&
         g.out_w >= 2;
}

void forward_pool(const Geometry& g, const float* x, const float* w, const PoolEpilogue& p,
                  float* pooled, uint8_t* taps, int64_t b0, int64_t b1) {
  g_forward_pool.fetch_add(1, std::memory_order_relaxed);
  const int64_t nv = vectors(g);
  const std::vector<float> packed = packed_kernel(g, w);
  std::vector<float> bias(static_cast<size_t>(nv * kLanes), 0.0f);
  if (p.bias != nullptr) std::copy_n(p.bias, g.c_out, bias.begin());
  thread_local std::vector<float> buffer;
  const int64_t image = g.in_h * g.in_w * g.c_in;
  const int64_t out_image = (g.out_h / 2) * (g.out_w / 2) * g.c_out;
  for (int64_t b = b0; b < b1; ++b) {
    const Source src = padded_image(g, x + b * image, buffer);
    const std::vector<int64_t> off = tap_offsets(g, src.width, 0);
    uint8_t* image_taps = taps != nullptr ? taps + b * out_image : nullptr;
    cpu::dispatch([&] {
      with_vectors(g, [&](auto nv_c) {
        forward_pool_image<decltype(nv_c)::value>(g, src, off.data(), packed.data(),
                                                  p.bias != nullptr ? bias.data() : nullptr,
                                                  p.relu, pooled + b * out_image, image_taps);
      });
    });
  }
  release_if_large(buffer);
}

void pool_kernel_grad_add(const Geometry& g, const float* x, const uint8_t* taps,
                          const float* pool_grad, uint8_t keep, float* dw, float* db, int64_t b0,
                          int64_t b1) {
  g_pool_kernel_grad.fetch_add(1, std::memory_order_relaxed);
  const int64_t nv = vectors(g), n = g.taps(), wide = nv * kLanes;
  const int64_t block = tap_block(g);
  thread_local std::vector<float> buffer, wide_grad;
  thread_local std::vector<uint8_t> wide_taps;
  const int64_t image = g.in_h * g.in_w * g.c_in, windows = (g.out_h / 2) * (g.out_w / 2);
  for (int64_t b = b0; b < b1; ++b) {
    const Source src = padded_image(g, x + b * image, buffer);
    const std::vector<int64_t> off = tap_offsets(g, src.width, (block - n % block) % block);
    const float* dp = pool_grad + b * windows * g.c_out;
    const uint8_t* tp = taps + b * windows * g.c_out;
    if (g.c_out != wide) {  // each window's channels widened to nv vectors
      wide_grad.assign(static_cast<size_t>(windows * wide), 0.0f);
      wide_taps.assign(static_cast<size_t>(windows * wide), 0);
      for (int64_t i = 0; i < windows; ++i) {
        std::memcpy(wide_grad.data() + i * wide, dp + i * g.c_out, sizeof(float) * g.c_out);
        std::memcpy(wide_taps.data() + i * wide, tp + i * g.c_out, g.c_out);
      }
      dp = wide_grad.data();
      tp = wide_taps.data();
    }
    cpu::dispatch([&] {
      with_vectors(g, [&](auto nv_c) {
        pool_grad_image<decltype(nv_c)::value>(g, src, off.data(), tp, dp, keep, dw, db);
      });
    });
  }
  release_if_large(buffer);
  release_if_large(wide_grad);
  release_if_large(wide_taps);
}

}  // namespace kiln::ops::direct_conv

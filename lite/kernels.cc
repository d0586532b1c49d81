// libkiln_lite's kernels (lite/kernels.h): the reference loops the tests trust, a portable path
// gcc vectorises at baseline x86-64, and AVX-512 (VNNI for int8) paths picked at run time.
#include "lite/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "kiln/error.h"

#if defined(__x86_64__)
// GCC 12's intrinsics seed their unused operands with a self-initialised `__Y`, which
// -W(maybe-)uninitialized reports at inlined uses (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#define KILN_LITE_INT8_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define KILN_LITE_F32_TARGET __attribute__((target("avx512f")))
#endif

namespace kiln::lite::kernels {
namespace {

constexpr int64_t kBlock = 16;     // output channels in one zmm register
constexpr int64_t kGenericK = 16;  // whole SSE2 pmaddwd steps for the generic int8 dot product

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

bool cpu_has_avx512(bool vnni) {
#if defined(__x86_64__)
  // libgcc's cpuid reading also checks that the OS saves the AVX-512 state.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         (!vnni || (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512vnni")));
#else
  (void)vnni;
  return false;
#endif
}

// A path this CPU lacks packs for the generic path instead.
Path int8_packing(Path path) { return int8_path_available(path) ? path : Path::kGeneric; }

Path choose_path(bool (*available)(Path)) {
  if (const char* env = std::getenv("KILN_LITE_PATH")) {
    for (Path path : {Path::kReference, Path::kGeneric, Path::kAvx512}) {
      if (std::strcmp(env, path_name(path)) == 0 && available(path)) return path;
    }
  }
  return available(Path::kAvx512) ? Path::kAvx512 : Path::kGeneric;
}

// gemmlowp's SaturatingRoundingDoublingHighMul: a * b / 2^31 with its sign-dependent nudge and
// truncating division, which come to rounding halves up.
int32_t doubling_high_mul(int32_t a, int32_t b) {
  if (a == b && a == std::numeric_limits<int32_t>::min()) {
    return std::numeric_limits<int32_t>::max();
  }
  const int64_t ab = int64_t{a} * b;
  const int64_t nudge = ab >= 0 ? (1 << 30) : 1 - (1 << 30);
  return static_cast<int32_t>((ab + nudge) / (int64_t{1} << 31));
}

// gemmlowp's RoundingDivideByPOT: halves round away from zero.
int32_t rounding_divide_by_pot(int32_t x, int exponent) {
  const int32_t mask = static_cast<int32_t>((int64_t{1} << exponent) - 1);
  const int32_t remainder = x & mask;
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

// multiply_by_quantized_multiplier, here so the paths inline it (the exported one is
// interposable in a shared library). Shifts are clamped to [-31, 31] (quantize_multiplier gives
// more than 31 only for multipliers of 2^31 and more), and the left shift saturates where TF
// Lite's overflows.
inline int32_t requantize(int32_t x, Requant r) {
  const int shift = std::clamp(r.shift, -31, 31);
  const int64_t shifted =
      std::clamp<int64_t>(int64_t{x} * (int64_t{1} << std::max(shift, 0)),
                          std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
  return rounding_divide_by_pot(doubling_high_mul(static_cast<int32_t>(shifted), r.multiplier),
                                std::max(-shift, 0));
}

// The output clamp, done in int64 so that a saturated requant result plus the zero point
// cannot wrap. Bounds outside int8 are narrowed to it.
struct OutClamp {
  int64_t lo, hi, zp;
  explicit OutClamp(const QuantGemmParams& p)
      : lo(std::max(p.out_min, -128)), hi(std::min(p.out_max, 127)), zp(p.out_zero_point) {}
  int8_t operator()(int32_t requantized) const {
    return static_cast<int8_t>(std::min(std::max(requantized + zp, lo), hi));
  }
};

float activate(float x, Activation act) {
  // max(0, x) keeps _mm512_max_ps's answer for NaN (0), so the paths agree there too.
  if (act == Activation::kNone) return x;
  x = std::max(0.0f, x);
  return act == Activation::kRelu6 ? std::min(x, 6.0f) : x;
}

// Per-call scratch, kept per thread so the hot loops do not allocate.
template <typename T>
T* scratch(int64_t count) {
  thread_local std::vector<T> buffer;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(count);
  return buffer.data();
}

// A fused pool's rows per output row: 1, 2 or 4 (the tiles' row counts are multiples of
// these), dividing the row count.
void check_pool_rows(int64_t n, int pool_rows) {
  if ((pool_rows != 1 && pool_rows != 2 && pool_rows != kMaxPoolRows) || n % pool_rows != 0) {
    throw Error(ErrorCode::kInvalidArgument, "kiln::lite::kernels: " + std::to_string(n) +
                                                 " rows do not pool in groups of " +
                                                 std::to_string(pool_rows));
  }
}

// out[g][j] = max over the rows g * pool_rows + p of rows[.][j], from the type's lowest value
// with std::max, as the max pools take it (a NaN row is passed over).
template <typename T>
void max_of_row_groups(const T* rows, int64_t n, int64_t m, int pool_rows, T* out) {
  for (int64_t g = 0; g < n / pool_rows; ++g) {
    const T* first = rows + g * pool_rows * m;
    std::fill(out + g * m, out + (g + 1) * m, std::numeric_limits<T>::lowest());
    for (int p = 0; p < pool_rows; ++p) {
      for (int64_t j = 0; j < m; ++j) out[g * m + j] = std::max(out[g * m + j], first[p * m + j]);
    }
  }
}

// ---- reference and generic paths ------------------------------------------------------------

// int32 holds every sum for k up to 2^31 / (255 * 128), about 65000, with room for a bias.
void quant_gemm_reference(const int8_t* a, int64_t n, const PackedInt8& w, const QuantGemmParams& p,
                          int8_t* out) {
  const OutClamp clamp(p);
  const int64_t m = w.m(), k = w.k();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      const int8_t* wj = w.data() + j * w.k_padded();
      int32_t acc = p.bias ? p.bias[j] : 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += (a[i * k + kk] - p.a_zero_point) * wj[kk];
      out[i * m + j] = clamp(requantize(acc, p.requant[j]));
    }
  }
}

// The zero-point-corrected row in int16 lets gcc use pmaddwd (8 products per instruction).
void quant_gemm_generic(const int8_t* a, int64_t n, const PackedInt8& w, const QuantGemmParams& p,
                        int8_t* out) {
  const OutClamp clamp(p);
  // The mask tells gcc that k_padded is a multiple of 16, so the dot product is vectorised
  // without a scalar tail, also where -O2's cheap cost model would not vectorise it at all.
  const int64_t m = w.m(), k = w.k(), kp = w.k_padded() & ~(kGenericK - 1);
  int16_t* row = scratch<int16_t>(kp);
  std::fill(row + k, row + kp, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t kk = 0; kk < k; ++kk) {
      row[kk] = static_cast<int16_t>(a[i * k + kk] - p.a_zero_point);
    }
    for (int64_t j = 0; j < m; ++j) {
      const int8_t* wj = w.data() + j * kp;
      int32_t acc = 0;
      for (int64_t kk = 0; kk < kp; ++kk) acc += int32_t{row[kk]} * wj[kk];
      if (p.bias) acc += p.bias[j];
      out[i * m + j] = clamp(requantize(acc, p.requant[j]));
    }
  }
}

void gemm_f32_reference(const float* a, int64_t n, const PackedF32& w, const float* bias,
                        Activation act, float* out) {
  const int64_t m = w.m(), k = w.k();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      float acc = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) acc += a[i * k + kk] * w.data()[j * k + kk];
      if (bias) acc += bias[j];
      out[i * m + j] = activate(acc, act);
    }
  }
}

// GCC's vector extensions (SSE2 at baseline, NEON on arm64): -O3 vectorises the plain loop
// across k instead and runs it at a quarter of the speed.
typedef float F32x4 __attribute__((vector_size(16)));

// R rows x one 16-column block of the blocked layout: R = 2 keeps the 8 accumulators, a weight
// row and a product within SSE2's 16 registers. Each output sums in k order, like the reference.
template <int R>
void f32_generic_tile(const float* a, int64_t k, const float* wb, const float* bias, Activation act,
                      int64_t j0, int64_t m, float* out) {
  F32x4 acc[R][kBlock / 4] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    F32x4 wv[kBlock / 4];
    std::memcpy(wv, wb + kk * kBlock, sizeof(wv));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float ar = a[r * k + kk];
#pragma GCC unroll 4
      for (int t = 0; t < kBlock / 4; ++t) acc[r][t] += ar * wv[t];
    }
  }
  const int64_t cols = std::min(kBlock, m - j0);
  for (int r = 0; r < R; ++r) {
    float sums[kBlock];
    std::memcpy(sums, acc[r], sizeof(sums));
    for (int64_t t = 0; t < cols; ++t) {
      out[r * m + j0 + t] = activate(bias ? sums[t] + bias[j0 + t] : sums[t], act);
    }
  }
}

void gemm_f32_generic(const float* a, int64_t n, const PackedF32& w, const float* bias,
                      Activation act, float* out) {
  const int64_t m = w.m(), k = w.k();
  for (int64_t i = 0; i < n; i += 2) {
    for (int64_t j = 0; j < m; j += kBlock) {
      const float* wb = w.data() + j * k;
      if (n - i >= 2) {
        f32_generic_tile<2>(a + i * k, k, wb, bias, act, j, m, out + i * m);
      } else {
        f32_generic_tile<1>(a + i * k, k, wb, bias, act, j, m, out + i * m);
      }
    }
  }
}

// ---- AVX-512 paths --------------------------------------------------------------------------
#if defined(__x86_64__)

// Walks the output in tiles of R rows x C 16-column blocks, calling
// tiles.start_rows(i0, R) once per row chunk and tiles.tile<R, C>(i0, block) per tile. R*C
// accumulators stay at most 24 of the 32 zmm registers; the row counts of a last short chunk
// are powers of two so few tile shapes get compiled.
template <int R, typename Tiles>
void run_tile(Tiles& tiles, int cols, int64_t i0, int64_t block) {
  switch (cols) {
    case 4:
      if constexpr (R <= 6) tiles.template tile<R, 4>(i0, block);
      break;
    case 3:
      if constexpr (R <= 8) tiles.template tile<R, 3>(i0, block);
      break;
    case 2:
      tiles.template tile<R, 2>(i0, block);
      break;
    default:
      tiles.template tile<R, 1>(i0, block);
  }
}

// With a fused pool every chunk's rows are whole pool windows: pool_rows (1, 2 or 4) divides
// n and each chunk's row count (12, 8, 4 and 2 halve down to multiples of it).
template <typename Tiles>
void run_tiles(int64_t n, int64_t blocks, Tiles& tiles, int pool_rows = 1) {
  const int max_cols = static_cast<int>(std::min<int64_t>(blocks, 4));
  int max_rows = max_cols == 4 ? 6 : max_cols == 3 ? 8 : 12;
  if (max_rows % pool_rows != 0) max_rows = 4;
  for (int64_t i0 = 0; i0 < n;) {
    int rows = max_rows;
    while (rows > n - i0) rows = rows > 8 ? 8 : rows > 4 ? 4 : rows / 2;
    tiles.start_rows(i0, rows);
    for (int64_t b = 0; b < blocks; b += max_cols) {
      const int cols = static_cast<int>(std::min<int64_t>(max_cols, blocks - b));
      switch (rows) {
        case 12:
          run_tile<12>(tiles, cols, i0, b);
          break;
        case 8:
          run_tile<8>(tiles, cols, i0, b);
          break;
        case 6:
          run_tile<6>(tiles, cols, i0, b);
          break;
        case 4:
          run_tile<4>(tiles, cols, i0, b);
          break;
        case 2:
          run_tile<2>(tiles, cols, i0, b);
          break;
        default:
          run_tile<1>(tiles, cols, i0, b);
      }
    }
    i0 += rows;
  }
}

uint16_t lane_mask(int64_t m, int64_t j) {
  return m - j >= kBlock ? 0xFFFF : static_cast<uint16_t>((1u << (m - j)) - 1);
}

// Per output channel (m_padded entries each) the vector requant's operands, derived once per
// call so the tile does only lane-wise work.
struct Int8Channels {
  const int32_t *acc0, *mul, *lsh, *sat_lo, *sat_hi, *rsh, *rmask, *rhalf;
  int32_t lo, hi, zp;  // the output clamp with the zero point taken off its bounds
  bool left_shifts;    // whether any channel's shift is > 0
};

// One 16-channel block's requant operands, held in registers while a tile's rows use them.
struct Requant16 {
  __m512i mul, mul_odd, lsh, sat_lo, sat_hi, rsh, rmask, rhalf, lo, hi, zp;
  bool left_shifts;
};

KILN_LITE_INT8_TARGET inline Requant16 load_requant16(const Int8Channels& ch, int64_t j) {
  const __m512i mul = _mm512_loadu_si512(ch.mul + j);
  return {mul,
          _mm512_srli_epi64(mul, 32),
          _mm512_loadu_si512(ch.lsh + j),
          _mm512_loadu_si512(ch.sat_lo + j),
          _mm512_loadu_si512(ch.sat_hi + j),
          _mm512_loadu_si512(ch.rsh + j),
          _mm512_loadu_si512(ch.rmask + j),
          _mm512_loadu_si512(ch.rhalf + j),
          _mm512_set1_epi32(ch.lo),
          _mm512_set1_epi32(ch.hi),
          _mm512_set1_epi32(ch.zp),
          ch.left_shifts};
}

// requantize() and the output clamp on 16 lanes, bit for bit.
KILN_LITE_INT8_TARGET inline __m512i requantize16(__m512i x, const Requant16& rq) {
  const __m512i one = _mm512_set1_epi32(1);
  // Saturating left shift (multipliers > 1 only): lanes that would overflow take the bound.
  __m512i v = x;
  if (rq.left_shifts) {
    v = _mm512_sllv_epi32(x, rq.lsh);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpgt_epi32_mask(x, rq.sat_hi),
                              _mm512_set1_epi32(std::numeric_limits<int32_t>::max()));
    v = _mm512_mask_mov_epi32(v, _mm512_cmplt_epi32_mask(x, rq.sat_lo),
                              _mm512_set1_epi32(std::numeric_limits<int32_t>::min()));
  }
  // Doubling high mul as (v * mul + 2^30) >> 31 on the even and odd lanes' 64-bit products;
  // mul >= 0 rules out the one saturating case.
  const __m512i nudge = _mm512_set1_epi64(int64_t{1} << 30);
  const __m512i even = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epi32(v, rq.mul), nudge), 31);
  const __m512i odd = _mm512_slli_epi64(
      _mm512_add_epi64(_mm512_mul_epi32(_mm512_srli_epi64(v, 32), rq.mul_odd), nudge), 1);
  const __m512i h = _mm512_mask_blend_epi32(0xAAAA, even, odd);
  // Rounding right shift, halves away from zero.
  const __m512i rem = _mm512_and_si512(h, rq.rmask);
  const __m512i threshold = _mm512_mask_add_epi32(
      rq.rhalf, _mm512_cmplt_epi32_mask(h, _mm512_setzero_si512()), rq.rhalf, one);
  __m512i q = _mm512_srav_epi32(h, rq.rsh);
  q = _mm512_mask_add_epi32(q, _mm512_cmpgt_epi32_mask(rem, threshold), q, one);
  return _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(q, rq.lo), rq.hi), rq.zp);
}

// Stores the 128-bit lane L of u[0..3], the four rows' groups 4L .. 4L + 3, a group apart.
template <int L>
KILN_LITE_INT8_TARGET inline void store_lanes(const __m512i (&u)[4], uint8_t* first,
                                              int64_t stride) {
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(first + (4 * L + i) * stride),
                     _mm512_extracti32x4_epi32(u[i], L));
  }
}

struct Int8Tiles {
  const int8_t* a;
  int64_t k, m, groups;  // groups: k_padded / 4
  const int8_t* w;
  Int8Channels ch;
  uint8_t* rows;  // the row chunk as [groups][R][4] u8
  int8_t* out;
  int pool_rows;  // the fused max pool's rows per output row

  // Moves a row chunk to u8 (a + 128) with each row's 4 k values of a group side by side, so a
  // tile reads every broadcast at a fixed offset from one pointer. Four rows at a time go as a
  // 4 x 16 transpose of 4-byte groups; a last group's bytes past k take any value (the packed
  // weights there are 0).
  KILN_LITE_INT8_TARGET void start_rows(int64_t i0, int r_count) {
    const int64_t stride = int64_t{r_count} * 4;  // bytes from one group to the next
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    int r = 0;
    for (; r + 4 <= r_count; r += 4) {
      const int8_t* row = a + (i0 + r) * k;
      uint8_t* dst = rows + 4 * r;
      for (int64_t g0 = 0; g0 < groups; g0 += 16) {
        const int64_t bytes = std::min<int64_t>(64, k - 4 * g0);
        const __mmask64 mask = bytes == 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
        __m512i x[4];
        for (int q = 0; q < 4; ++q) {
          x[q] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, row + q * k + 4 * g0), flip);
        }
        const __m512i t0 = _mm512_unpacklo_epi32(x[0], x[1]),
                      t1 = _mm512_unpackhi_epi32(x[0], x[1]);
        const __m512i t2 = _mm512_unpacklo_epi32(x[2], x[3]),
                      t3 = _mm512_unpackhi_epi32(x[2], x[3]);
        // u[i] holds groups i, i + 4, i + 8, i + 12 of the four rows, one per 128-bit lane.
        const __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                              _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
        uint8_t* first = dst + g0 * stride;
        if (groups - g0 >= 16) {
          store_lanes<0>(u, first, stride);
          store_lanes<1>(u, first, stride);
          store_lanes<2>(u, first, stride);
          store_lanes<3>(u, first, stride);
          continue;
        }
        alignas(64) uint8_t spill[4][64];
        for (int i = 0; i < 4; ++i) _mm512_store_si512(spill[i], u[i]);
        for (int64_t g = 0; g < groups - g0; ++g) {
          std::memcpy(first + g * stride, spill[g % 4] + 16 * (g / 4), 16);
        }
      }
    }
    for (; r < r_count; ++r) {
      const int8_t* row = a + (i0 + r) * k;
      uint8_t* dst = rows + 4 * r;
      int64_t g = 0;
      for (; 4 * g + 4 <= k; ++g) {
        uint32_t v;
        std::memcpy(&v, row + 4 * g, 4);
        v ^= 0x80808080u;
        std::memcpy(dst + g * stride, &v, 4);
      }
      for (int64_t kk = 4 * g; kk < k; ++kk) dst[g * stride + kk % 4] = row[kk] ^ 0x80;
    }
  }

  template <int R, int C>
  KILN_LITE_INT8_TARGET void tile(int64_t i0, int64_t block) {
    const int64_t j0 = block * kBlock, w_stride = groups * 64;
    const int8_t* wp = w + block * w_stride;
    const uint8_t* ap = rows;
    __m512i acc[R][C];
#pragma GCC unroll 12
    for (int c = 0; c < C; ++c) {
      const __m512i init = _mm512_loadu_si512(ch.acc0 + j0 + c * kBlock);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r][c] = init;
    }
    for (int64_t g = 0; g < groups; ++g, ap += 4 * R, wp += 64) {
      __m512i wv[C];
#pragma GCC unroll 12
      for (int c = 0; c < C; ++c) wv[c] = _mm512_loadu_si512(wp + c * w_stride);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        int32_t a4;
        std::memcpy(&a4, ap + 4 * r, 4);
        const __m512i av = _mm512_set1_epi32(a4);
#pragma GCC unroll 12
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], av, wv[c]);
      }
    }
    // The sums go through memory: unrolled together with the requant, gcc 12 spills them
    // inside the k loop (a third slower). The locals are there because the int8 stores may
    // alias any member.
    alignas(64) int32_t sums[C][R][kBlock];
#pragma GCC unroll 12
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) _mm512_store_si512(sums[c][r], acc[r][c]);
    }
    const int64_t ldo = m;
    const int pool = pool_rows;
    int8_t* const out_rows = out + i0 / pool * m;
    const Int8Channels channels = ch;
    for (int c = 0; c < C; ++c) {
      const int64_t j = j0 + c * kBlock;
      const uint16_t mask = lane_mask(ldo, j);
      const Requant16 rq = load_requant16(channels, j);
      for (int r = 0; r < R; r += pool) {
        __m512i sum = _mm512_load_si512(sums[c][r]);
        for (int p = 1; p < pool; ++p)
          sum = _mm512_max_epi32(sum, _mm512_load_si512(sums[c][r + p]));
        const __m128i q = _mm512_cvtepi32_epi8(requantize16(sum, rq));
        int8_t* dst = out_rows + r / pool * ldo + j;
        if (mask == 0xFFFF) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), q);
        } else {
          _mm_mask_storeu_epi8(dst, mask, q);
        }
      }
    }
  }
};

// The per-channel operands of requantize16, [8][m_padded] (acc0, mul, lsh, sat_lo, sat_hi, rsh,
// rmask, rhalf); returns whether any channel shifts left.
bool int8_channel_operands(const PackedInt8& w, const QuantGemmParams& p,
                           std::vector<int32_t>& operands) {
  const int64_t m = w.m(), mp = w.m_padded();
  operands.assign(8 * mp, 0);
  int32_t* s = operands.data();
  int32_t *acc0 = s, *mul = s + mp, *lsh = s + 2 * mp, *sat_lo = s + 3 * mp, *sat_hi = s + 4 * mp,
          *rsh = s + 5 * mp, *rmask = s + 6 * mp, *rhalf = s + 7 * mp;
  bool left_shifts = false;
  for (int64_t j = 0; j < m; ++j) {
    // The (a + 128) rows add 128 * row_sums, and the zero point takes off a_zp * row_sums.
    // Wrapping int32 arithmetic, like vpdpbusd's, still ends on the exact sum.
    const int64_t start =
        (p.bias ? p.bias[j] : 0) - int64_t{p.a_zero_point + 128} * w.row_sums()[j];
    acc0[j] = static_cast<int32_t>(static_cast<uint32_t>(start));
    const int shift = std::clamp(p.requant[j].shift, -31, 31);
    const int left = std::max(shift, 0), right = std::max(-shift, 0);
    left_shifts |= left > 0;
    mul[j] = p.requant[j].multiplier;
    lsh[j] = left;
    sat_lo[j] = std::numeric_limits<int32_t>::min() >> left;
    sat_hi[j] = std::numeric_limits<int32_t>::max() >> left;
    rsh[j] = right;
    rmask[j] = static_cast<int32_t>((int64_t{1} << right) - 1);
    rhalf[j] = rmask[j] >> 1;
  }
  return left_shifts;
}

void quant_gemm_avx512(const int8_t* a, int64_t n, const PackedInt8& w, const QuantGemmParams& p,
                       const int32_t* operands, bool left_shifts, int8_t* out, int pool_rows) {
  const int64_t mp = w.m_padded();
  const int32_t* s = operands;
  const OutClamp clamp(p);
  const Int8Channels ch{s,
                        s + mp,
                        s + 2 * mp,
                        s + 3 * mp,
                        s + 4 * mp,
                        s + 5 * mp,
                        s + 6 * mp,
                        s + 7 * mp,
                        static_cast<int32_t>(clamp.lo - clamp.zp),
                        static_cast<int32_t>(clamp.hi - clamp.zp),
                        p.out_zero_point,
                        left_shifts};
  Int8Tiles tiles{
      a,   w.k(),    w.m(), w.k_padded() / 4, w.data(), ch, scratch<uint8_t>(12 * w.k_padded()),
      out, pool_rows};
  run_tiles(n, mp / kBlock, tiles, pool_rows);
}

struct F32Tiles {
  const float* a;
  int64_t k, m;
  const float* w;  // [m_padded / 16][k][16]
  const float* bias;
  Activation act;
  float* out;
  int pool_rows;  // the fused max pool's rows per output row

  void start_rows(int64_t, int) {}

  template <int R, int C>
  KILN_LITE_F32_TARGET void tile(int64_t i0, int64_t block) {
    const float* ap = a + i0 * k;
    const float* wp = w + block * kBlock * k;
    __m512 acc[R][C];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 12
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; ++kk, ++ap, wp += kBlock) {
      __m512 wv[C];
#pragma GCC unroll 12
      for (int c = 0; c < C; ++c) wv[c] = _mm512_loadu_ps(wp + c * kBlock * k);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512 av = _mm512_set1_ps(ap[r * k]);
#pragma GCC unroll 12
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(av, wv[c], acc[r][c]);
      }
    }
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    const int pool = pool_rows;
#pragma GCC unroll 12
    for (int c = 0; c < C; ++c) {
      const int64_t j = (block + c) * kBlock;
      const uint16_t mask = lane_mask(m, j);
      const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + j) : zero;
      // A pool takes std::max(pooled, row) from the lowest float, as max_pool_f32 does, after
      // the bias and activation: the same bits as the two ops apart, NaNs included.
      const __m512 lowest = _mm512_set1_ps(std::numeric_limits<float>::lowest());
      __m512 pooled = lowest;
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        __m512 v = _mm512_add_ps(acc[r][c], b);
        if (act != Activation::kNone) v = _mm512_max_ps(v, zero);
        if (act == Activation::kRelu6) v = _mm512_min_ps(v, six);
        if (pool == 1) {
          _mm512_mask_storeu_ps(out + (i0 + r) * m + j, mask, v);
          continue;
        }
        pooled = _mm512_mask_mov_ps(pooled, _mm512_cmp_ps_mask(pooled, v, _CMP_LT_OQ), v);
        if (r % pool != pool - 1) continue;
        _mm512_mask_storeu_ps(out + (i0 / pool + r / pool) * m + j, mask, pooled);
        pooled = lowest;
      }
    }
  }
};

#endif  // defined(__x86_64__)

template <typename Visit>
void for_each_window(int64_t n, int64_t h, int64_t w, const Window& win, Visit visit) {
  const int64_t oh = win.out_h(h), ow = win.out_w(w);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      const int64_t y = oy * win.stride_h - win.pad_top;
      const int64_t y0 = std::max<int64_t>(y, 0), y1 = std::min(y + win.kh, h);
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t x = ox * win.stride_w - win.pad_left;
        const int64_t x0 = std::max<int64_t>(x, 0), x1 = std::min(x + win.kw, w);
        visit((b * oh + oy) * ow + ox, b, y0, y1, x0, x1);
      }
    }
  }
}

// Copies `count` elements. A patch row is often a few bytes (a 3x3 window over one channel):
// fixed-size pieces compile to plain moves, where a copy of run-time length calls memmove.
template <typename T>
void copy_run(const T* src, int64_t count, T* dst) {
  size_t n = static_cast<size_t>(count) * sizeof(T);
  const char* s = reinterpret_cast<const char*>(src);
  char* d = reinterpret_cast<char*>(dst);
  if (n > 64) {
    std::memcpy(d, s, n);
    return;
  }
  for (; n >= 8; n -= 8, s += 8, d += 8) std::memcpy(d, s, 8);
  if (n >= 4) {
    std::memcpy(d, s, 4);
    n -= 4, s += 4, d += 4;
  }
  if (n >= 2) {
    std::memcpy(d, s, 2);
    n -= 2, s += 2, d += 2;
  }
  if (n > 0) *d = *s;
}

// Copies L bytes, n times, from and to addresses `step` apart: one fixed-size memcpy each.
template <size_t L>
void copy_strided(const char* s, int64_t s_step, char* d, int64_t d_step, int64_t n) {
  for (int64_t i = 0; i < n; ++i, s += s_step, d += d_step) std::memcpy(d, s, L);
}
using CopyStrided = void (*)(const char*, int64_t, char*, int64_t, int64_t);
// The copier for rows of `bytes` bytes, or null for a size without one.
CopyStrided strided_copier(size_t bytes) {
  switch (bytes) {
    case 1:
      return copy_strided<1>;
    case 2:
      return copy_strided<2>;
    case 3:
      return copy_strided<3>;
    case 4:
      return copy_strided<4>;
    case 6:
      return copy_strided<6>;
    case 8:
      return copy_strided<8>;
    case 9:
      return copy_strided<9>;
    case 12:
      return copy_strided<12>;
    case 16:
      return copy_strided<16>;
    case 20:
      return copy_strided<20>;
    case 24:
      return copy_strided<24>;
    case 32:
      return copy_strided<32>;
    case 36:
      return copy_strided<36>;
    case 48:
      return copy_strided<48>;
    case 64:
      return copy_strided<64>;
    case 96:
      return copy_strided<96>;
    case 128:
      return copy_strided<128>;
    case 192:
      return copy_strided<192>;
    default:
      return nullptr;
  }
}

// One patch row segment: the window's kernel row ky at output (oy, ox), padding filled.
template <typename T>
void patch_row(const T* x, int64_t b, int64_t h, int64_t w, int64_t c, const Window& win, T pad,
               int64_t y, int64_t ox, T* p) {
  if (y < 0 || y >= h) {
    std::fill(p, p + win.kw * c, pad);
    return;
  }
  const int64_t x0 = ox * win.stride_w - win.pad_left;
  // The kernel's columns inside the input are one contiguous run of the input row.
  const int64_t kx0 = std::clamp<int64_t>(-x0, 0, win.kw);
  const int64_t kx1 = std::clamp<int64_t>(w - x0, kx0, win.kw);
  if (kx0 > 0) std::fill(p, p + kx0 * c, pad);
  copy_run(x + ((b * h + y) * w + x0 + kx0) * c, (kx1 - kx0) * c, p + kx0 * c);
  if (kx1 < win.kw) std::fill(p + kx1 * c, p + win.kw * c, pad);
}

// Row by kernel row: the outputs whose window lies inside the input horizontally copy their
// kw * c elements with one fixed-size copy each; the edges go through patch_row. Rows are in
// pooled order (see im2col_int8); a 1 x 1 pool is the plain raster order.
template <typename T>
void im2col(const T* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win, T pad,
            T* patches, int64_t pool_h, int64_t pool_w) {
  const int64_t row = win.kh * win.kw * c;
  const int64_t ph = win.out_h(h) / pool_h, pw = win.out_w(w) / pool_w;
  if (ph <= 0 || pw <= 0) return;
  const int64_t sw = win.stride_w, window = pool_h * pool_w;
  // Consecutive pooled columns px step the output column by pool_w: the input by pool_w * sw
  // columns, the patch rows by a whole pool window's rows.
  const int64_t d_step = window * row, s_step = pool_w * sw * c;
  const size_t span = static_cast<size_t>(win.kw * c) * sizeof(T);
  const CopyStrided copier = strided_copier(span);
  for (int64_t dx = 0; dx < pool_w; ++dx) {
    // Pooled columns [px_lo, px_hi) read whole windows inside the row: x0 >= 0 and
    // x0 + kw <= w, for x0 = (px * pool_w + dx) * sw - pad_left.
    const int64_t step = pool_w * sw;
    const int64_t lo_room = win.pad_left - dx * sw, hi_room = w - win.kw + win.pad_left - dx * sw;
    const int64_t px_lo = std::min(pw, lo_room <= 0 ? 0 : (lo_room + step - 1) / step);
    const int64_t px_hi = std::max(px_lo, std::min(pw, hi_room >= 0 ? hi_room / step + 1 : 0));
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t py = 0; py < ph; ++py) {
        for (int64_t dy = 0; dy < pool_h; ++dy) {
          const int64_t oy = py * pool_h + dy;
          for (int64_t ky = 0; ky < win.kh; ++ky) {
            const int64_t y = oy * win.stride_h - win.pad_top + ky;
            const bool inside = y >= 0 && y < h;
            T* col =
                patches + ((b * ph + py) * pw * window + dy * pool_w + dx) * row + ky * win.kw * c;
            for (int64_t px = 0; px < pw; ++px) {
              const int64_t ox = px * pool_w + dx;
              if (inside && px == px_lo && px_hi > px_lo) {
                const T* src = x + ((b * h + y) * w + ox * sw - win.pad_left) * c;
                if (copier != nullptr) {
                  copier(reinterpret_cast<const char*>(src),
                         static_cast<int64_t>(s_step * sizeof(T)),
                         reinterpret_cast<char*>(col + px * d_step),
                         static_cast<int64_t>(d_step * sizeof(T)), px_hi - px_lo);
                } else {
                  for (int64_t i = 0; i < px_hi - px_lo; ++i) {
                    std::memcpy(col + (px + i) * d_step, src + i * s_step, span);
                  }
                }
                px = px_hi - 1;
                continue;
              }
              patch_row(x, b, h, w, c, win, pad, y, ox, col + px * d_step);
            }
          }
        }
      }
    }
  }
}

template <typename T>
void max_pool(const T* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win, T* out) {
  const auto pool = [&](int64_t o, int64_t b, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
    T* dst = out + o * c;
    std::fill(dst, dst + c, std::numeric_limits<T>::lowest());
    for (int64_t y = y0; y < y1; ++y) {
      for (int64_t xx = x0; xx < x1; ++xx) {
        const T* src = x + ((b * h + y) * w + xx) * c;
        for (int64_t ch = 0; ch < c; ++ch) dst[ch] = std::max(dst[ch], src[ch]);
      }
    }
  };
  for_each_window(n, h, w, win, pool);
}

// Sums each window's inputs per channel in Acc; finish(sum, count) gives the output.
template <typename T, typename Acc, typename Finish>
void avg_pool(const T* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win, T* out,
              Finish finish) {
  std::vector<Acc> sums(c);
  const auto pool = [&](int64_t o, int64_t b, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
    std::fill(sums.begin(), sums.end(), Acc{0});
    for (int64_t y = y0; y < y1; ++y) {
      for (int64_t xx = x0; xx < x1; ++xx) {
        const T* src = x + ((b * h + y) * w + xx) * c;
        for (int64_t ch = 0; ch < c; ++ch) sums[ch] += src[ch];
      }
    }
    const int64_t count = std::max<int64_t>(y1 - y0, 0) * std::max<int64_t>(x1 - x0, 0);
    for (int64_t ch = 0; ch < c; ++ch) out[o * c + ch] = count ? finish(sums[ch], count) : T{0};
  };
  for_each_window(n, h, w, win, pool);
}

}  // namespace

const char* path_name(Path path) {
  switch (path) {
    case Path::kReference:
      return "reference";
    case Path::kGeneric:
      return "generic";
    case Path::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool int8_path_available(Path path) {
  static const bool avx512 = cpu_has_avx512(/*vnni=*/true);
  return path != Path::kAvx512 || avx512;
}

bool float_path_available(Path path) {
  static const bool avx512 = cpu_has_avx512(/*vnni=*/false);
  return path != Path::kAvx512 || avx512;
}

Path best_int8_path() {
  static const Path path = choose_path(int8_path_available);
  return path;
}

Path best_float_path() {
  static const Path path = choose_path(float_path_available);
  return path;
}

// Not positive, NaN or infinite multipliers give {0, 0} (every product 0), as do ones below
// 2^-32, whose shift would pass -31.
Requant quantize_multiplier(double real_multiplier) {
  if (!(real_multiplier > 0) || !std::isfinite(real_multiplier)) return {};
  int shift = 0;
  const double q = std::frexp(real_multiplier, &shift);
  int64_t q_fixed = std::llround(q * (int64_t{1} << 31));
  if (q_fixed == (int64_t{1} << 31)) {
    q_fixed /= 2;
    ++shift;
  }
  if (shift < -31) return {};
  return {static_cast<int32_t>(q_fixed), shift};
}

int32_t multiply_by_quantized_multiplier(int32_t x, Requant r) { return requantize(x, r); }

// kAvx512 packs [m_padded/16][k_padded/4][16][4] for vpdpbusd. The other paths keep [m][k]
// rows, padded to k_padded (kGenericK) and m_padded with zeros; the reference reads only k.
PackedInt8::PackedInt8(const int8_t* weights, int64_t m, int64_t k, Path path)
    : m_(m),
      k_(k),
      k_padded_(round_up(k, int8_packing(path) == Path::kAvx512 ? 4 : kGenericK)),
      m_padded_(round_up(m, kBlock)),
      path_(int8_packing(path)),
      data_(m_padded_ * k_padded_, 0),
      row_sums_(m, 0) {
  for (int64_t j = 0; j < m; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const int8_t v = weights[j * k + kk];
      row_sums_[j] += v;
      if (path_ == Path::kAvx512) {
        const int64_t group = j / kBlock * (k_padded_ / 4) + kk / 4;
        data_[(group * kBlock + j % kBlock) * 4 + kk % 4] = v;
      } else {
        data_[j * k_padded_ + kk] = v;
      }
    }
  }
}

QuantGemm::QuantGemm(const PackedInt8& w, const QuantGemmParams& params) : w_(&w), params_(params) {
#if defined(__x86_64__)
  if (w.path() == Path::kAvx512) left_shifts_ = int8_channel_operands(w, params, operands_);
#endif
}

void QuantGemm::run(const int8_t* a, int64_t n, int8_t* out, int pool_rows) const {
  const PackedInt8& w = *w_;
  if (n <= 0 || w.m() <= 0) return;
  check_pool_rows(n, pool_rows);
#if defined(__x86_64__)
  if (w.path() == Path::kAvx512) {
    return quant_gemm_avx512(a, n, w, params_, operands_.data(), left_shifts_, out, pool_rows);
  }
#endif
  // The other paths pool the requantized rows (the same bits: the requant is monotonic).
  int8_t* rows = pool_rows == 1 ? out : scratch<int8_t>(n * w.m());
  if (w.path() == Path::kReference) {
    quant_gemm_reference(a, n, w, params_, rows);
  } else {
    quant_gemm_generic(a, n, w, params_, rows);
  }
  if (pool_rows > 1) max_of_row_groups(rows, n, w.m(), pool_rows, out);
}

void quant_gemm(const int8_t* a, int64_t n, const PackedInt8& w, const QuantGemmParams& params,
                int8_t* out) {
  QuantGemm(w, params).run(a, n, out);
}

// The reference keeps [m][k]; the others pack [m_padded/16][k][16] (zero columns past m).
PackedF32::PackedF32(const float* weights, int64_t m, int64_t k, Path path)
    : m_(m), k_(k), path_(float_path_available(path) ? path : Path::kGeneric) {
  if (path_ == Path::kReference) {
    m_padded_ = m;
    data_.assign(weights, weights + m * k);
    return;
  }
  m_padded_ = round_up(m, kBlock);
  data_.assign(m_padded_ * k, 0.0f);
  for (int64_t j = 0; j < m; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      data_[(j / kBlock * k + kk) * kBlock + j % kBlock] = weights[j * k + kk];
    }
  }
}

void gemm_f32(const float* a, int64_t n, const PackedF32& w, const float* bias, Activation act,
              float* out, int pool_rows) {
  if (n <= 0 || w.m() <= 0) return;
  check_pool_rows(n, pool_rows);
#if defined(__x86_64__)
  if (w.path() == Path::kAvx512) {
    F32Tiles tiles{a, w.k(), w.m(), w.data(), bias, act, out, pool_rows};
    return run_tiles(n, w.m_padded() / kBlock, tiles, pool_rows);
  }
#endif
  float* rows = pool_rows == 1 ? out : scratch<float>(n * w.m());
  if (w.path() == Path::kReference) {
    gemm_f32_reference(a, n, w, bias, act, rows);
  } else {
    gemm_f32_generic(a, n, w, bias, act, rows);
  }
  if (pool_rows > 1) max_of_row_groups(rows, n, w.m(), pool_rows, out);
}

namespace {

// The depthwise convolution's sums: acc(b, oy, ox, o) = init(o) + sum over the taps inside the
// input, in (ky, kx) order, of term(x, w); finish(b, oy, ox, acc[0..m)) writes an output row.
// The reference visits one channel at a time; the other path all channels per tap.
template <typename Acc, typename T, typename Term, typename Finish>
void depthwise(const T* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
               const T* weights, int64_t m, bool reference, Acc init_zero, Term term,
               Finish finish) {
  const int64_t oh = win.out_h(h), ow = win.out_w(w), mult = m / c;
  thread_local std::vector<Acc> acc;  // per thread: the interpreter splits images over threads
  acc.resize(m);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t y0 = oy * win.stride_h - win.pad_top, x0 = ox * win.stride_w - win.pad_left;
        auto tap_row = [&](int64_t ky, int64_t kx) -> const T* {
          const int64_t y = y0 + ky, xx = x0 + kx;
          return y < 0 || y >= h || xx < 0 || xx >= w ? nullptr : x + ((b * h + y) * w + xx) * c;
        };
        if (reference) {
          for (int64_t o = 0; o < m; ++o) {
            Acc a = init_zero;
            for (int64_t ky = 0; ky < win.kh; ++ky) {
              for (int64_t kx = 0; kx < win.kw; ++kx) {
                if (const T* xr = tap_row(ky, kx)) {
                  a += term(xr[o / mult], weights[(ky * win.kw + kx) * m + o]);
                }
              }
            }
            acc[o] = a;
          }
        } else {
          std::fill(acc.begin(), acc.end(), init_zero);
          Acc* __restrict a = acc.data();
          for (int64_t ky = 0; ky < win.kh; ++ky) {
            for (int64_t kx = 0; kx < win.kw; ++kx) {
              const T* xr = tap_row(ky, kx);
              if (xr == nullptr) continue;
              const T* __restrict wr = weights + (ky * win.kw + kx) * m;
              if (mult == 1) {
                for (int64_t o = 0; o < m; ++o) a[o] += term(xr[o], wr[o]);
              } else {
                for (int64_t o = 0; o < m; ++o) a[o] += term(xr[o / mult], wr[o]);
              }
            }
          }
        }
        finish(b, oy, ox, acc.data());
      }
    }
  }
}

}  // namespace

void depthwise_conv_int8(const int8_t* x, int64_t n, int64_t h, int64_t w, int64_t c,
                         const Window& win, const int8_t* weights, int64_t m,
                         const QuantGemmParams& p, Path path, int8_t* out) {
  if (c <= 0 || m % c != 0) return;
  const OutClamp clamp(p);
  const int64_t oh = win.out_h(h), ow = win.out_w(w);
  const int32_t zp = p.a_zero_point;
  depthwise(
      x, n, h, w, c, win, weights, m, path == Path::kReference, int32_t{0},
      [zp](int8_t xv, int8_t wv) { return (int32_t{xv} - zp) * int32_t{wv}; },
      [&](int64_t b, int64_t oy, int64_t ox, const int32_t* acc) {
        int8_t* dst = out + ((b * oh + oy) * ow + ox) * m;
        for (int64_t o = 0; o < m; ++o) {
          // Wrapping like the GEMM paths: the exact sum fits int32.
          const int32_t sum = static_cast<int32_t>(static_cast<uint32_t>(acc[o]) +
                                                   static_cast<uint32_t>(p.bias ? p.bias[o] : 0));
          dst[o] = clamp(requantize(sum, p.requant[o]));
        }
      });
}

void depthwise_conv_f32(const float* x, int64_t n, int64_t h, int64_t w, int64_t c,
                        const Window& win, const float* weights, int64_t m, const float* bias,
                        Activation act, Path path, float* out) {
  if (c <= 0 || m % c != 0) return;
  const int64_t oh = win.out_h(h), ow = win.out_w(w);
  depthwise(
      x, n, h, w, c, win, weights, m, path == Path::kReference, 0.0f,
      [](float xv, float wv) { return xv * wv; },
      [&](int64_t b, int64_t oy, int64_t ox, const float* acc) {
        float* dst = out + ((b * oh + oy) * ow + ox) * m;
        for (int64_t o = 0; o < m; ++o) dst[o] = activate(bias ? acc[o] + bias[o] : acc[o], act);
      });
}

void im2col_int8(const int8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                 int8_t pad_value, int8_t* patches, int64_t pool_h, int64_t pool_w) {
  im2col(x, n, h, w, c, win, pad_value, patches, pool_h, pool_w);
}

void im2col_f32(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                float* patches, int64_t pool_h, int64_t pool_w) {
  im2col(x, n, h, w, c, win, 0.0f, patches, pool_h, pool_w);
}

// A window wholly in the padding has no input: its max is the type's lowest value.
#if defined(__x86_64__)
namespace {

// 64 channels a step (masked at the end); an empty window keeps the lowest value, as max_pool.
KILN_LITE_INT8_TARGET void max_pool_int8_avx512(const int8_t* x, int64_t n, int64_t h, int64_t w,
                                                int64_t c, const Window& win, int8_t* out) {
  const int64_t oh = win.out_h(h), ow = win.out_w(w);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      const int64_t y0 = std::max<int64_t>(0, oy * win.stride_h - win.pad_top);
      const int64_t y1 = std::min<int64_t>(h, oy * win.stride_h - win.pad_top + win.kh);
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t x0 = std::max<int64_t>(0, ox * win.stride_w - win.pad_left);
        const int64_t x1 = std::min<int64_t>(w, ox * win.stride_w - win.pad_left + win.kw);
        int8_t* dst = out + ((b * oh + oy) * ow + ox) * c;
        for (int64_t ch = 0; ch < c; ch += 64) {
          const __mmask64 mask = c - ch >= 64 ? ~__mmask64{0} : (__mmask64{1} << (c - ch)) - 1;
          __m512i acc = _mm512_set1_epi8(-128);
          for (int64_t y = y0; y < y1; ++y) {
            for (int64_t xx = x0; xx < x1; ++xx) {
              acc = _mm512_max_epi8(
                  acc, _mm512_maskz_loadu_epi8(mask, x + ((b * h + y) * w + xx) * c + ch));
            }
          }
          _mm512_mask_storeu_epi8(dst + ch, mask, acc);
        }
      }
    }
  }
}

}  // namespace
#endif

void max_pool_int8(const int8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                   int8_t* out) {
#if defined(__x86_64__)
  if (int8_path_available(Path::kAvx512)) {
    max_pool_int8_avx512(x, n, h, w, c, win, out);
    return;
  }
#endif
  max_pool(x, n, h, w, c, win, out);
}

void max_pool_f32(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                  float* out) {
  max_pool(x, n, h, w, c, win, out);
}

// A window wholly in the padding averages to 0.
void avg_pool_int8(const int8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                   int8_t* out) {
  avg_pool<int8_t, int32_t>(x, n, h, w, c, win, out, [](int32_t sum, int64_t count) {
    const int64_t half = count / 2;
    return static_cast<int8_t>((sum >= 0 ? sum + half : sum - half) / count);
  });
}

void avg_pool_f32(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                  float* out) {
  avg_pool<float, float>(x, n, h, w, c, win, out,
                         [](float sum, int64_t count) { return sum / static_cast<float>(count); });
}

void softmax_f32(const float* x, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = out + r * cols;
    const float max = cols > 0 ? *std::max_element(xr, xr + cols) : 0.0f;
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - max);
      sum += yr[c];
    }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= sum;
  }
}

// NaN quantizes to the zero point; infinities clamp.
namespace {

// std::round written out (truncate, then step away from zero on a fraction of at least one
// half), the same in the scalar and the vector code. NaN quantizes to the zero point.
inline int8_t quantize_one(float x, float scale, int32_t zero_point) {
  float v = x / scale;
  v = v != v ? 0.f : std::min(std::max(v, -512.f), 512.f);
  const float whole = static_cast<float>(static_cast<int32_t>(v));
  const float fraction = v - whole;  // exact: |v| < 2^24
  const int32_t rounded =
      static_cast<int32_t>(whole) + (fraction >= 0.5f ? 1 : 0) - (fraction <= -0.5f ? 1 : 0);
  return static_cast<int8_t>(std::min(std::max(rounded + zero_point, -128), 127));
}

#if defined(__x86_64__)
KILN_LITE_F32_TARGET int64_t quantize_avx512(const float* x, int64_t count, float scale,
                                             int32_t zero_point, int8_t* out) {
  const __m512 s = _mm512_set1_ps(scale), lo = _mm512_set1_ps(-512.f), hi = _mm512_set1_ps(512.f);
  const __m512 half = _mm512_set1_ps(0.5f), minus_half = _mm512_set1_ps(-0.5f);
  const __m512i one = _mm512_set1_epi32(1), zp = _mm512_set1_epi32(zero_point);
  const __m512i qmin = _mm512_set1_epi32(-128), qmax = _mm512_set1_epi32(127);
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i), s);
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m512i whole = _mm512_cvttps_epi32(v);
    const __m512 fraction = _mm512_sub_ps(v, _mm512_cvtepi32_ps(whole));
    __m512i r =
        _mm512_mask_add_epi32(whole, _mm512_cmp_ps_mask(fraction, half, _CMP_GE_OQ), whole, one);
    r = _mm512_mask_sub_epi32(r, _mm512_cmp_ps_mask(fraction, minus_half, _CMP_LE_OQ), r, one);
    r = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(r, zp), qmin), qmax);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(r));
  }
  return i;
}
#endif

}  // namespace

void quantize_f32(const float* x, int64_t count, float scale, int32_t zero_point, int8_t* out) {
  int64_t i = 0;
#if defined(__x86_64__)
  if (float_path_available(Path::kAvx512)) i = quantize_avx512(x, count, scale, zero_point, out);
#endif
  for (; i < count; ++i) out[i] = quantize_one(x[i], scale, zero_point);
}

void dequantize_int8(const int8_t* q, int64_t count, float scale, int32_t zero_point, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = scale * static_cast<float>(q[i] - zero_point);
}

void activation_f32(const float* x, int64_t count, int32_t kind, float* out) {
  auto sigmoid = [](float v) { return 1.f / (1.f + std::exp(-v)); };
  for (int64_t i = 0; i < count; ++i) {
    const float v = x[i];
    switch (kind) {
      case 1:
        out[i] = std::tanh(v);
        break;
      case 2:
        out[i] = sigmoid(v);
        break;
      case 3:
        out[i] = v * sigmoid(v);
        break;
      case 4:
        out[i] = std::max(v, 0.f) + std::log1p(std::exp(-std::abs(v)));
        break;
      case 6:
        out[i] = 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f));
        break;
      default:
        out[i] = std::max(v, 0.f);
        break;
    }
  }
}

void channel_affine_f32(const float* x, int64_t rows, int64_t c, const float* scale,
                        const float* shift, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c; ++j) out[r * c + j] = x[r * c + j] * scale[j] + shift[j];
  }
}

void layer_norm_f32(const float* x, int64_t rows, int64_t c, const float* gamma, const float* beta,
                    float epsilon, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += xr[j];
    const double mean = sum / static_cast<double>(c);
    double squares = 0;
    for (int64_t j = 0; j < c; ++j) squares += (xr[j] - mean) * (xr[j] - mean);
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(c) + epsilon);
    for (int64_t j = 0; j < c; ++j) {
      out[r * c + j] = static_cast<float>((xr[j] - mean) * inv) * gamma[j] + beta[j];
    }
  }
}

QuantAddParams quant_add_params(float a_scale, int32_t a_zero_point, float b_scale,
                                int32_t b_zero_point, float out_scale, int32_t out_zero_point) {
  const double twice_max = 2.0 * std::max<double>(a_scale, b_scale);
  QuantAddParams p;
  p.a_zero_point = a_zero_point;
  p.b_zero_point = b_zero_point;
  p.out_zero_point = out_zero_point;
  p.a = quantize_multiplier(a_scale / twice_max);
  p.b = quantize_multiplier(b_scale / twice_max);
  p.out = quantize_multiplier(twice_max / ((1 << 20) * static_cast<double>(out_scale)));
  return p;
}

void add_int8(const int8_t* a, const int8_t* b, int64_t count, const QuantAddParams& p,
              int8_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    const int32_t sa = multiply_by_quantized_multiplier((a[i] - p.a_zero_point) * (1 << 20), p.a);
    const int32_t sb = multiply_by_quantized_multiplier((b[i] - p.b_zero_point) * (1 << 20), p.b);
    const int32_t v = multiply_by_quantized_multiplier(sa + sb, p.out) + p.out_zero_point;
    out[i] = static_cast<int8_t>(std::min(127, std::max(-128, v)));
  }
}

void add_f32(const float* a, const float* b, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

void requantize_int8(const int8_t* q, int64_t count, Requant r, int32_t zero_point,
                     int32_t out_zero_point, int8_t* out) {
  for (int64_t i = 0; i < count; ++i) {
    const int32_t v = multiply_by_quantized_multiplier(q[i] - zero_point, r) + out_zero_point;
    out[i] = static_cast<int8_t>(std::min(127, std::max(-128, v)));
  }
}

}  // namespace kiln::lite::kernels

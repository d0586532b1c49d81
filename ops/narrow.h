// Array loops on the 16-bit float types: conversions between f32 and bf16/f16 (bfloat16(float),
// half(float) and their widening, kiln/dtype.h, the same bits) and relu on stored values. Exact
// integer arithmetic, compiled for each x86-64 level (cpu::dispatch): the copies give the same
// bits. Kernels that compute a narrow output in f32 store it through these, so that the
// portable library converts at the host's vector width.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln::ops {

// bfloat16(f)'s bits without a branch: round to nearest even on the upper 16 bits; a NaN stays
// a quiet NaN.
inline uint16_t bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t rounded = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  const uint16_t quiet = static_cast<uint16_t>((u >> 16) | 0x40u);
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
}

// half(f)'s bits, with the subnormal case rounded by one f32 addition (vectorizes better than
// half(float)'s clamp and two additions).
inline uint16_t f16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u, mag = x & 0x7fffffffu;
  const uint32_t normal = (mag + 0xfffu + ((mag >> 13) & 1u) - 0x38000000u) >> 13;
  // Below 2^-14 (subnormal or zero): |x| in units of 2^-24, rounded to nearest even by adding
  // 2^23 in f32 (exact scaling; the sum's ulp is 1).
  const float units = std::bit_cast<float>(mag) * 16777216.0f + 8388608.0f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(units) - 0x4b000000u;
  uint32_t r = mag < 0x38800000u ? subnormal : normal;
  r = mag >= 0x477ff000u ? 0x7c00u : r;  // rounds to 65520 or more: infinity
  r = mag > 0x7f800000u ? 0x7e00u : r;   // NaN: the quiet NaN
  return static_cast<uint16_t>(sign | r);
}

// T(f) for T bfloat16 or half, the same bits, without branches: for loops in dispatched
// kernels, which should vectorize (bfloat16(float) branches on NaN).
template <class T>
inline T narrowed(float f) {
  static_assert(std::is_same_v<T, bfloat16> || std::is_same_v<T, half>);
  T r;
  r.bits = std::is_same_v<T, bfloat16> ? bf16_bits(f) : f16_bits(f);
  return r;
}

// dst[i] = T(src[i]) for T bfloat16 or half, on the calling thread.
void round_into(const float* src, int64_t n, bfloat16* dst);
void round_into(const float* src, int64_t n, half* dst);

// dst[i] = float(src[i]), on the calling thread.
void widen_into(const bfloat16* src, int64_t n, float* dst);
void widen_into(const half* src, int64_t n, float* dst);

// The same, split over the thread pool (inline when called from a pool task).
void parallel_round_into(const float* src, int64_t n, bfloat16* dst);
void parallel_round_into(const float* src, int64_t n, half* dst);
void parallel_widen_into(const bfloat16* src, int64_t n, float* dst);
void parallel_widen_into(const half* src, int64_t n, float* dst);

// relu on n bf16 (bf16 true) or f16 values in place, as Kiln's relu: x <= 0 (-0 included)
// becomes +0, NaN stays. Rounding is monotone and keeps 0, so relu(round(x)) == round(relu(x)):
// applied to what a kernel rounded once, it gives the bits of relu applied to the f32 sum before
// the rounding (oneDNN's relu post-op would turn NaN into 0).
void relu_keeping_nan(void* p, int64_t n, bool bf16);

}  // namespace kiln::ops

// Array conversions f32 <-> bf16/f16 (ops/narrow.h), dispatched over the x86-64 levels.
#include "ops/narrow.h"

#include <bit>

#include "runtime/thread_pool.h"
#include "src/core/cpu_isa.h"

namespace kiln::ops {

namespace {

constexpr int64_t kGrain = 1 << 15;

}  // namespace

void round_into(const float* src, int64_t n, bfloat16* dst) {
  cpu::dispatch([&] {
    const float* __restrict s = src;
    uint16_t* __restrict d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_bits(s[i]);
  });
}

void round_into(const float* src, int64_t n, half* dst) {
  cpu::dispatch([&] {
    const float* __restrict s = src;
    uint16_t* __restrict d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f16_bits(s[i]);
  });
}

void widen_into(const bfloat16* src, int64_t n, float* dst) {
  cpu::dispatch([&] {
    const uint16_t* __restrict s = reinterpret_cast<const uint16_t*>(src);
    float* __restrict d = dst;
    for (int64_t i = 0; i < n; ++i) d[i] = std::bit_cast<float>(static_cast<uint32_t>(s[i]) << 16);
  });
}

void widen_into(const half* src, int64_t n, float* dst) {
  cpu::dispatch([&] {
    const half* __restrict s = src;
    float* __restrict d = dst;
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);
  });
}

// As signed 16-bit integers, -0 to -inf are exactly the values <= -inf's bits (0x8000 to 0xff80
// for bf16, 0x8000 to 0xfc00 for f16), and the negative NaNs lie above them: one signed
// comparison, which vectorizes at every level (SSE2's pcmpgtw).
void relu_keeping_nan(void* p, int64_t n, bool bf16) {
  const int16_t minus_inf = static_cast<int16_t>(bf16 ? 0xff80u : 0xfc00u);
  int16_t* __restrict bits = static_cast<int16_t*>(p);
  cpu::dispatch([bits, n, minus_inf] {
    for (int64_t i = 0; i < n; ++i) bits[i] = bits[i] <= minus_inf ? int16_t{0} : bits[i];
  });
}

namespace {

// f over [0, n) in pieces of at least kGrain elements on the pool.
template <class S, class D>
void split(void (*f)(const S*, int64_t, D*), const S* src, int64_t n, D* dst) {
  runtime::parallel_for(n, kGrain, [&](int64_t b, int64_t e) { f(src + b, e - b, dst + b); });
}

}  // namespace

void parallel_round_into(const float* src, int64_t n, bfloat16* dst) {
  split<float, bfloat16>(round_into, src, n, dst);
}
void parallel_round_into(const float* src, int64_t n, half* dst) {
  split<float, half>(round_into, src, n, dst);
}
void parallel_widen_into(const bfloat16* src, int64_t n, float* dst) {
  split<bfloat16, float>(widen_into, src, n, dst);
}
void parallel_widen_into(const half* src, int64_t n, float* dst) {
  split<half, float>(widen_into, src, n, dst);
}

}  // namespace kiln::ops

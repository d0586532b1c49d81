// The fused kernels' epilogues in bf16 and f16 (compiler/cpu/fused_conv.h, fused_dot.h):
// act(conv(x, w) + bias) and act(a b + bias) with the bias and activation applied to the f32 sums
// before their one rounding, on random shapes (1-d and 2-d, strides, padding, dilation, groups;
// transposed and batched GEMMs), every bias kind and activation, eagerly, compiled and
// interpreted, against an f64 reference computed from the f32 values before they were rounded.
// Each case says which path ran (bf16: one oneDNN kernel where the host has a bf16 unit), the
// bf16 fallback gives the unfused ops' bits, and f16 gives the bits of the f32 kernel on the
// widened operands rounded once.
//
// The bound, per output element. u is the narrow type's unit roundoff (bf16 2^-8, f16 2^-11), e
// half its smallest subnormal (bf16 2^-134, f16 2^-25), u32 = 2^-24; K the reduction length
// (kh kw c_in / groups for a convolution, k for a dot), and over the K terms S = sum |x||w|,
// T = sum (|x| + |w|) (taps on padding count as zero terms).
// - The sum (tests/ops/lowp_matmul_test.cc derives it): operands rounded once to the narrow
//   type, products exact in f32, K - 1 adds in f32 in any order, one final rounding:
//   B = P + (g + u (1 + g)) (S + P) + e + K 2^-53 S + 3 K 2^-126, P = (2u + u^2) S + e (1 + u) T
//   + K e^2, g = K u32 / (1 - K u32). (B holds a final rounding, so it also covers the f32 sum
//   s before any rounding; the 2^-126 term covers oneDNN's bf16 instructions flushing
//   subnormals; K 2^-53 S the f64 reference's own error.)
// - x = exact + bias, r = act(x) in f64, L the activation's Lipschitz constant (1; logistic
//   1/4), a its f32 approximation error (2^-20 for tanh and logistic, whose values are at most 1;
//   none for relu).
//   fused pre-activation:    |fl32(s + bias) - x| <= B + u32 (|x| + B)
//   unfused pre-activation:  |round(round(s) + bias) - x| <= B + (u + u32) (|x| + B) + e
//   after the activation and its one rounding: L pre + a + u (|r| + L pre + a) + e.
// So the error grows with K u32 S and 3u S, f32's roundoff per term and the narrow type's once:
// a kernel that summed in the narrow type (K u S) or dropped an activation fails it.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "compiler/executable.h"
#include "compiler/pipeline.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "ops/conv.h"
#include "ops/onednn_conv.h"
#include "ops/onednn_matmul.h"
#include "tests/testing/lowp.h"
#include "tests/testing/onednn.h"

namespace kiln {
namespace {

using testing::stored;

using testing::with_onednn;

double unit_roundoff(DType t) { return t == bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }
double half_subnormal(DType t) { return t == bf16 ? std::ldexp(1.0, -134) : std::ldexp(1.0, -25); }
constexpr double kU32 = 0x1p-24;

// B above, for reduction length k, S = sum |x||w| and T = sum (|x| + |w|).
double sum_bound(DType t, int64_t k, double s, double sum_abs) {
  const double u = unit_roundoff(t), e = half_subnormal(t);
  const double g = k * kU32 / (1 - k * kU32);
  const double p = (2 * u + u * u) * s + e * (1 + u) * sum_abs + k * e * e;
  return p + (g + u * (1 + g)) * (s + p) + e + k * 0x1p-53 * s + 3.0 * k * 0x1p-126;
}

double activation_f64(const std::string& act, double x) {
  if (act == "relu") return x <= 0 ? 0 : x;
  if (act == "tanh") return std::tanh(x);
  if (act == "logistic") return 1 / (1 + std::exp(-x));
  return x;
}

// The bound after the activation and its rounding, from the pre-activation's bound.
double activation_bound(DType t, const std::string& act, double pre, double r) {
  const double u = unit_roundoff(t), e = half_subnormal(t);
  const double lipschitz = act == "logistic" ? 0.25 : 1.0;
  const double approx = act == "tanh" || act == "logistic" ? 0x1p-20 : 0.0;
  const double post = lipschitz * pre + approx;
  return post + u * (std::abs(r) + post) + e;
}

Tensor apply_activation(const std::string& act, Tensor y) {
  if (act == "relu") return relu(y);
  if (act == "tanh") return tanh(y);
  if (act == "logistic") return logistic(y);
  return y;
}

enum class Bias { kNone, kScalar, kVector };
const char* bias_name(Bias b) {
  return b == Bias::kNone ? "no bias" : b == Bias::kScalar ? "scalar bias" : "vector bias";
}

// The exact value of one output element before the bias, and the sums the bound needs.
struct Exact {
  double value = 0, s = 0, sum_abs = 0;
};

// ---- convolutions ----

// A 1-d (h = kh = 1, given as rank-3 tensors) or 2-d convolution in Kiln's NHWC / HWIO layouts.
struct ConvCase {
  bool one_d = false;
  int64_t batch = 1, c_in = 1, c_out = 1, groups = 1;
  int64_t in[2] = {1, 1}, kernel[2] = {1, 1}, strides[2] = {1, 1}, pad_low[2] = {0, 0},
          pad_high[2] = {0, 0}, dilation[2] = {1, 1};
  Bias bias = Bias::kVector;
  std::string act = "relu";

  int64_t out(int i) const {
    const int64_t span = (kernel[i] - 1) * dilation[i] + 1;
    return (in[i] + pad_low[i] + pad_high[i] - span) / strides[i] + 1;
  }
  int64_t reduction() const { return kernel[0] * kernel[1] * (c_in / groups); }
  // Spatial attributes: two values, or one (the width's) for a 1-d convolution.
  Axes axes(const int64_t* v) const { return one_d ? Axes{v[1]} : Axes{v[0], v[1]}; }
  ConvOptions options() const {
    return {axes(strides), axes(pad_low), axes(pad_high), axes(dilation), {}, groups};
  }
  Shape x_shape() const {
    return one_d ? Shape{batch, in[1], c_in} : Shape{batch, in[0], in[1], c_in};
  }
  Shape w_shape() const {
    return one_d ? Shape{kernel[1], c_in / groups, c_out}
                 : Shape{kernel[0], kernel[1], c_in / groups, c_out};
  }
  Shape bias_shape() const { return bias == Bias::kScalar ? Shape{} : Shape{c_out}; }
  std::string str() const {
    auto two = [&](const int64_t* v) {
      return one_d ? std::to_string(v[1]) : std::to_string(v[0]) + "x" + std::to_string(v[1]);
    };
    return std::string(one_d ? "1-d" : "2-d") + " batch " + std::to_string(batch) + " in " +
           two(in) + "x" + std::to_string(c_in) + " kernel " + two(kernel) + " -> " +
           std::to_string(c_out) + " strides " + two(strides) + " pad " + two(pad_low) + "/" +
           two(pad_high) + " dilation " + two(dilation) + " groups " + std::to_string(groups) +
           ", " + bias_name(bias) + ", " + act;
  }
};

struct ConvData {
  std::vector<float> x, w, bias;  // f32 values before rounding (the bias: after)
};

// Output element (n, oy, ox, co) in f64.
Exact exact_conv(const ConvCase& c, const ConvData& d, int64_t n, int64_t oy, int64_t ox,
                 int64_t co) {
  Exact r;
  const int64_t cg_in = c.c_in / c.groups, g = co / (c.c_out / c.groups);
  for (int64_t ky = 0; ky < c.kernel[0]; ++ky)
    for (int64_t kx = 0; kx < c.kernel[1]; ++kx) {
      const int64_t iy = oy * c.strides[0] - c.pad_low[0] + ky * c.dilation[0];
      const int64_t ix = ox * c.strides[1] - c.pad_low[1] + kx * c.dilation[1];
      if (iy < 0 || iy >= c.in[0] || ix < 0 || ix >= c.in[1]) continue;
      for (int64_t ci = 0; ci < cg_in; ++ci) {
        const double xv = d.x[((n * c.in[0] + iy) * c.in[1] + ix) * c.c_in + g * cg_in + ci];
        const double wv = d.w[((ky * c.kernel[1] + kx) * cg_in + ci) * c.c_out + co];
        r.value += xv * wv;
        r.s += std::abs(xv * wv);
        r.sum_abs += std::abs(xv) + std::abs(wv);
      }
    }
  return r;
}

ConvData random_conv_data(const ConvCase& c, DType t, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), wide(-4.0f, 4.0f);
  ConvData d{std::vector<float>(num_elements(c.x_shape())),
             std::vector<float>(num_elements(c.w_shape())),
             std::vector<float>(c.bias == Bias::kNone ? 0 : num_elements(c.bias_shape()))};
  for (float& v : d.x) v = unit(rng);
  for (float& v : d.w) v = unit(rng);
  for (float& v : d.bias) {  // rounded to t: the reference adds the bias the kernel sees
    v = wide(rng);
    v = t == bf16 ? static_cast<float>(bfloat16(v)) : static_cast<float>(half(v));
  }
  return d;
}

struct ConvTensors {
  Tensor x, w, bias;
};

ConvTensors conv_tensors(const ConvCase& c, const ConvData& d, DType t) {
  ConvTensors r{convert(Tensor::from_vector(d.x, c.x_shape()), t),
                convert(Tensor::from_vector(d.w, c.w_shape()), t), Tensor()};
  if (c.bias != Bias::kNone) r.bias = convert(Tensor::from_vector(d.bias, c.bias_shape()), t);
  return r;
}

Attrs fused_conv_attrs(const ConvCase& c) {
  const ConvOptions o = c.options();
  return {{"strides", o.strides},
          {"padding_low", o.padding_low},
          {"padding_high", o.padding_high},
          {"dilation", o.dilation},
          {"lhs_dilation", Axes(o.strides.size(), 1)},
          {"groups", o.groups},
          {"activation", c.act}};
}

Tensor fused_conv_op(const ConvCase& c, const ConvTensors& t) {
  std::vector<Tensor> in = {t.x, t.w};
  if (c.bias != Bias::kNone) in.push_back(t.bias);
  return call_op("fused_conv", in, fused_conv_attrs(c))[0];
}

// convolution, add, activation as separate ops (eagerly, the reference kernels).
Tensor unfused_conv(const ConvCase& c, const ConvTensors& t) {
  Tensor y = conv(t.x, t.w, c.options());
  if (c.bias != Bias::kNone) y = y + t.bias;
  return apply_activation(c.act, y);
}

std::vector<float> values(const Tensor& t) { return convert(t, f32).to_vector<float>(); }

// Checks `fused` (one rounding) and `unfused` (the ops' roundings) against act(exact + bias);
// returns the worst error over bound of `fused`.
double check_conv(const ConvCase& c, const ConvData& d, DType t, const std::vector<float>& fused,
                  const std::vector<float>& unfused, const std::string& path) {
  const double u = unit_roundoff(t), e = half_subnormal(t);
  const int64_t oh = c.one_d ? 1 : c.out(0), ow = c.out(1);
  double worst = 0;
  int reported = 0;
  for (int64_t n = 0; n < c.batch; ++n)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox)
        for (int64_t co = 0; co < c.c_out; ++co) {
          const Exact ex = exact_conv(c, d, n, oy, ox, co);
          const int64_t at = ((n * oh + oy) * ow + ox) * c.c_out + co;
          const double b = c.bias == Bias::kNone     ? 0
                           : c.bias == Bias::kScalar ? d.bias[0]
                                                     : d.bias[co];
          const double x = ex.value + b, want = activation_f64(c.act, x);
          const double sb = sum_bound(t, c.reduction(), ex.s, ex.sum_abs);
          const double fused_bound =
              activation_bound(t, c.act, sb + kU32 * (std::abs(x) + sb), want);
          const double unfused_bound =
              activation_bound(t, c.act, sb + (u + kU32) * (std::abs(x) + sb) + e, want);
          const double err = std::abs(fused[at] - want);
          worst = std::max(worst, err / fused_bound);
          if ((err > fused_bound || std::abs(unfused[at] - want) > unfused_bound) &&
              reported++ < 3) {
            ADD_FAILURE() << dtype_name(t) << " " << c.str() << " on " << path << ": element " << at
                          << " fused " << fused[at] << ", unfused " << unfused[at]
                          << ", f64 reference " << want << "; bounds " << fused_bound
                          << " (fused), " << unfused_bound << " (unfused)";
          }
        }
  return worst;
}

// Random convolutions: 1-d and 2-d, strided, padded, dilated, grouped; every bias kind and
// activation cycled through them.
std::vector<ConvCase> conv_cases(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<ConvCase> out;
  const char* acts[] = {"none", "relu", "tanh", "logistic"};
  for (int i = 0; i < 24; ++i) {
    ConvCase c;
    c.one_d = i % 3 == 2;
    c.groups = i % 4 == 3 ? pick(2, 3) : 1;
    c.batch = pick(1, 3);
    c.c_in = c.groups * pick(1, 12);
    c.c_out = c.groups * pick(1, 12);
    for (int d = c.one_d ? 1 : 0; d < 2; ++d) {
      c.kernel[d] = pick(1, 4);
      c.strides[d] = pick(1, 2);
      c.dilation[d] = i % 5 == 4 ? pick(1, 2) : 1;
      c.pad_low[d] = pick(0, 2);
      c.pad_high[d] = pick(0, 2);
      c.in[d] = (c.kernel[d] - 1) * c.dilation[d] + 1 + pick(0, 9);
    }
    c.bias = static_cast<Bias>(i % 3);
    c.act = acts[(i / 3 + i) % 4];
    if (c.bias == Bias::kNone && c.act == "none") c.act = "relu";  // no epilogue otherwise
    out.push_back(c);
  }
  // A layer of the bundled CNN's size (K = 3 * 3 * 32 = 288) and a long reduction.
  out.push_back({false,
                 4,
                 32,
                 64,
                 1,
                 {14, 14},
                 {3, 3},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 {1, 1},
                 Bias::kVector,
                 "relu"});
  out.push_back(
      {false, 2, 256, 8, 1, {6, 6}, {3, 3}, {2, 2}, {0, 0}, {1, 1}, {1, 1}, Bias::kScalar, "tanh"});
  return out;
}

// Whether this host runs bf16 fused_conv and fused_dot in one oneDNN kernel: oneDNN built,
// switched on, and a bf16 unit in the ISA it dispatches to.
bool expect_onednn_bf16() {
  if (!ops::onednn::built() || !ops::onednn::enabled()) return false;
  const std::string isa = ops::onednn::cpu_isa();
  return isa == "avx512_core_bf16" || isa == "avx512_core_amx";
}

int64_t fused_conv_count() { return ops::onednn::counts().fused_forward; }

// bf16: one oneDNN kernel where the host has a bf16 unit, within the bound; switched off, the
// unfused ops' bits, also within their bound.
TEST(LowpEpilogue, Bf16FusedConvWithinBoundAndFallbackBitEqual) {
  std::mt19937 rng(41);
  const bool onednn = expect_onednn_bf16();
  double worst = 0, worst_fallback = 0;
  int in_one_kernel = 0, n = 0;
  for (const ConvCase& c : conv_cases(rng)) {
    const ConvData d = random_conv_data(c, bf16, rng);
    const ConvTensors t = conv_tensors(c, d, bf16);
    const int64_t before = fused_conv_count();
    const Tensor fused = fused_conv_op(c, t);
    const bool one_kernel = fused_conv_count() == before + 1;
    ++n;
    in_one_kernel += one_kernel;
    EXPECT_EQ(fused.dtype(), bf16);
    EXPECT_EQ(one_kernel, onednn) << c.str();
    const std::vector<float> unfused = values(unfused_conv(c, t));
    worst = std::max(worst, check_conv(c, d, bf16, values(fused), unfused,
                                       one_kernel ? "oneDNN" : "the fallback"));
    const std::vector<float> off = with_onednn(false, [&] { return values(fused_conv_op(c, t)); });
    const std::vector<float> off_unfused =
        with_onednn(false, [&] { return values(unfused_conv(c, t)); });
    EXPECT_EQ(fused_conv_count(), before + (one_kernel ? 1 : 0)) << "switched off, yet oneDNN ran";
    EXPECT_EQ(off, off_unfused) << c.str() << ": the fallback differs from conv, add, " << c.act;
    worst_fallback =
        std::max(worst_fallback, check_conv(c, d, bf16, off, off_unfused, "the fallback"));
  }
  std::cout << "[ path     ] bf16 fused_conv: " << in_one_kernel << " of " << n
            << " cases in one oneDNN kernel (ISA " << ops::onednn::cpu_isa()
            << "); worst error / bound " << worst << ", fallback " << worst_fallback << "\n";
}

// f16 (no f16 convolution in oneDNN 2.6): the operands widen to f32 and f32's convolution runs
// on them (oneDNN's where it serves the case, else Kiln's own), with the bias and activation
// applied to the f32 sums before the one rounding: exactly what f32's fused_conv on the widened
// operands, rounded to f16, gives, on oneDNN and switched off alike; within the bound, as are the
// unfused ops.
TEST(LowpEpilogue, F16FusedConvRoundsOnceWithinBound) {
  std::mt19937 rng(43);
  double worst = 0;
  int on_onednn = 0, n = 0;
  for (const ConvCase& c : conv_cases(rng)) {
    const ConvData d = random_conv_data(c, f16, rng);
    const ConvTensors t = conv_tensors(c, d, f16);
    const ConvTensors wide{convert(t.x, f32), convert(t.w, f32),
                           c.bias == Bias::kNone ? Tensor() : convert(t.bias, f32)};
    const int64_t before = ops::onednn::counts().forward;
    const Tensor fused = fused_conv_op(c, t);
    const bool f16_ran_on_onednn = ops::onednn::counts().forward > before;
    EXPECT_EQ(fused.dtype(), f16);
    const int64_t before32 = ops::onednn::counts().forward;
    const std::vector<float> once = values(convert(fused_conv_op(c, wide), f16));
    EXPECT_EQ(f16_ran_on_onednn, ops::onednn::counts().forward > before32)
        << c.str() << ": the f16 pass did not take f32's path";
    on_onednn += f16_ran_on_onednn;
    ++n;
    EXPECT_EQ(values(fused), once) << c.str() << ": not the f32 epilogue rounded once";
    const std::vector<float> off = with_onednn(false, [&] { return values(fused_conv_op(c, t)); });
    const std::vector<float> off_once =
        with_onednn(false, [&] { return values(convert(fused_conv_op(c, wide), f16)); });
    EXPECT_EQ(off, off_once) << c.str() << ", oneDNN off: not the f32 epilogue rounded once";
    worst = std::max(worst, check_conv(c, d, f16, values(fused), values(unfused_conv(c, t)),
                                       "the widened kernel"));
  }
  if (ops::onednn::enabled()) EXPECT_GT(on_onednn, 0) << "no f16 case ran on oneDNN's f32 kernels";
  std::cout << "[ path     ] f16 fused_conv: " << on_onednn << " of " << n
            << " cases on oneDNN's f32 kernels (widened); worst error / bound " << worst << "\n";
}

// ---- dots (f16; bf16 is tests/ops/lowp_matmul_test.cc's) ----

struct DotCase {
  int64_t batch = 1, m = 1, k = 1, n = 1;
  bool a_transposed = false, b_transposed = false;
  Bias bias = Bias::kVector;
  std::string act = "relu";
  std::string str() const {
    return std::to_string(batch) + " x [" + std::to_string(m) + "," + std::to_string(k) + "] x [" +
           std::to_string(k) + "," + std::to_string(n) + "]" + (a_transposed ? " a^T" : "") +
           (b_transposed ? " b^T" : "") + ", " + bias_name(bias) + ", " + act;
  }
};


Attrs dot_attrs(const DotCase& c) {
  return {{"lhs_contract", std::vector<int64_t>{c.a_transposed ? 1 : 2}},
          {"rhs_contract", std::vector<int64_t>{c.b_transposed ? 2 : 1}},
          {"lhs_batch", std::vector<int64_t>{0}},
          {"rhs_batch", std::vector<int64_t>{0}},
          {"activation", c.act}};
}

TEST(LowpEpilogue, F16FusedDotRoundsOnceWithinBound) {
  std::mt19937 rng(47);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), wide(-8.0f, 8.0f);
  const char* acts[] = {"none", "relu", "tanh", "logistic"};
  double worst = 0;
  for (int i = 0; i < 24; ++i) {
    DotCase c{pick(1, 3),
              pick(1, 130),
              pick(1, 900),
              pick(1, 130),
              i % 2 == 1,
              i % 4 >= 2,
              static_cast<Bias>(i % 3),
              acts[(i / 3 + i) % 4]};
    if (c.bias == Bias::kNone && c.act == "none") c.act = "tanh";
    std::vector<float> a(c.batch * c.m * c.k), b(c.batch * c.k * c.n);
    for (float& v : a) v = unit(rng);
    for (float& v : b) v = unit(rng);
    std::vector<Tensor> in = {stored(a, c.batch, c.m, c.k, c.a_transposed, f16),
                              stored(b, c.batch, c.k, c.n, c.b_transposed, f16)};
    // Every fourth vector bias is output-sized instead (fused_dot takes one; the pass never
    // makes one).
    const bool full = c.bias == Bias::kVector && i % 4 == 1;
    const Shape bias_shape = full                      ? Shape{c.batch, c.m, c.n}
                             : c.bias == Bias::kVector ? Shape{c.n}
                                                       : Shape{};
    std::vector<float> bias(num_elements(bias_shape));
    for (float& v : bias) v = wide(rng);
    const Tensor bias_t = convert(Tensor::from_vector(bias, bias_shape), f16);
    bias = values(bias_t);
    if (c.bias != Bias::kNone) in.push_back(bias_t);
    const Tensor fused = call_op("fused_dot", in, dot_attrs(c))[0];
    ASSERT_EQ(fused.dtype(), f16);
    // The f32 fused_dot on the widened operands (the same GEMM blocks), rounded once.
    std::vector<Tensor> wide_in;
    for (const Tensor& x : in) wide_in.push_back(convert(x, f32));
    EXPECT_EQ(values(fused), values(convert(call_op("fused_dot", wide_in, dot_attrs(c))[0], f16)))
        << c.str() << ": not the f32 epilogue rounded once";
    Tensor y = dot(in[0], in[1], {c.a_transposed ? 1 : 2}, {c.b_transposed ? 2 : 1}, {0}, {0});
    if (c.bias != Bias::kNone) y = y + bias_t;
    const std::vector<float> got = values(fused), unfused = values(apply_activation(c.act, y));
    const double u = unit_roundoff(f16), e = half_subnormal(f16);
    int reported = 0;
    for (int64_t bi = 0; bi < c.batch; ++bi)
      for (int64_t r = 0; r < c.m; ++r)
        for (int64_t j = 0; j < c.n; ++j) {
          Exact ex;
          for (int64_t kk = 0; kk < c.k; ++kk) {
            const double p = a[(bi * c.m + r) * c.k + kk], q = b[(bi * c.k + kk) * c.n + j];
            ex.value += p * q;
            ex.s += std::abs(p * q);
            ex.sum_abs += std::abs(p) + std::abs(q);
          }
          const double bv = c.bias == Bias::kNone     ? 0
                            : c.bias == Bias::kScalar ? bias[0]
                            : full                    ? bias[(bi * c.m + r) * c.n + j]
                                                      : bias[j];
          const double x = ex.value + bv, want = activation_f64(c.act, x);
          const double sb = sum_bound(f16, c.k, ex.s, ex.sum_abs);
          const double fb = activation_bound(f16, c.act, sb + kU32 * (std::abs(x) + sb), want);
          const double ub =
              activation_bound(f16, c.act, sb + (u + kU32) * (std::abs(x) + sb) + e, want);
          const int64_t at = (bi * c.m + r) * c.n + j;
          worst = std::max(worst, std::abs(got[at] - want) / fb);
          if ((std::abs(got[at] - want) > fb || std::abs(unfused[at] - want) > ub) &&
              reported++ < 3) {
            ADD_FAILURE() << c.str() << ": element " << at << " fused " << got[at] << ", unfused "
                          << unfused[at] << ", f64 reference " << want << "; bounds " << fb << ", "
                          << ub;
          }
        }
  }
  std::cout << "[ path     ] f16 fused_dot: worst error / bound " << worst << "\n";
}

// Compiled, an f16 dense layer relu(x w + b) is one fused_dot kernel thunk, with the bits of the
// eager fused_dot and within the bound of the interpreter's dot, add and relu.
TEST(LowpEpilogue, CompiledF16DenseLayerIsOneFusedDot) {
  std::mt19937 rng(67);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> a(64 * 300), b(300 * 48), bias(48);
  for (float& v : a) v = unit(rng);
  for (float& v : b) v = unit(rng);
  for (float& v : bias) v = 4 * unit(rng);
  Graph g("f16_dense");
  Tensor px = g.placeholder(f16, {64, 300}, "x"), pw = g.placeholder(f16, {300, 48}, "w");
  Tensor pb = g.placeholder(f16, {48}, "b");
  Tensor y = relu(matmul(px, pw) + pb);
  const FeedList feeds = {{px, convert(Tensor::from_vector(a, {64, 300}), f16)},
                          {pw, convert(Tensor::from_vector(b, {300, 48}), f16)},
                          {pb, convert(Tensor::from_vector(bias, {48}), f16)}};
  compiler::Executable exe = compiler::compile(g, {y}, feeds);
  std::string thunks;
  for (const std::string& th : exe.thunk_descriptions()) thunks += th + "\n";
  ASSERT_EQ(exe.thunk_descriptions().size(), 1u) << thunks;
  EXPECT_NE(thunks.find("kernel fused_dot"), std::string::npos) << thunks;
  const std::vector<float> compiled = values(exe.run(feeds)[0]);
  const Attrs attrs = {{"lhs_contract", std::vector<int64_t>{1}},
                       {"rhs_contract", std::vector<int64_t>{0}},
                       {"activation", std::string("relu")}};
  EXPECT_EQ(
      compiled,
      values(call_op("fused_dot", {feeds[0].second, feeds[1].second, feeds[2].second}, attrs)[0]));
  const std::vector<float> interpreted = values(g.run(feeds, y));
  const std::vector<float> bv = values(feeds[2].second);
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 48; ++j) {
      Exact ex;
      for (int64_t k = 0; k < 300; ++k) {
        const double p = a[i * 300 + k], q = b[k * 48 + j];
        ex.value += p * q;
        ex.s += std::abs(p * q);
        ex.sum_abs += std::abs(p) + std::abs(q);
      }
      const double x = ex.value + bv[j], want = activation_f64("relu", x);
      const double sb = sum_bound(f16, 300, ex.s, ex.sum_abs);
      const double bound = activation_bound(f16, "relu", sb + kU32 * (std::abs(x) + sb), want);
      ASSERT_LE(std::abs(compiled[i * 48 + j] - want), bound) << "(" << i << "," << j << ")";
      ASSERT_LE(
          std::abs(interpreted[i * 48 + j] - want),
          activation_bound(
              f16, "relu",
              sb + (unit_roundoff(f16) + kU32) * (std::abs(x) + sb) + half_subnormal(f16), want));
    }
}

// ---- NaN ----

// A NaN in the input reaches the outputs it feeds through relu (Kiln's relu keeps NaN; oneDNN's
// would make it 0), tanh and logistic, on every path, as through the unfused ops.
TEST(LowpEpilogue, NanInTheInputSurvivesTheFusedActivation) {
  for (bool on : {true, false})
    for (DType t : {bf16, f16})
      for (const char* act : {"relu", "tanh", "logistic"}) {
        ConvCase c{false,         2,  4, 8, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1},
                   Bias::kVector, act};
        std::mt19937 rng(53);
        ConvData d = random_conv_data(c, t, rng);
        d.x[((1 * 6 + 2) * 6 + 3) * 4 + 1] = NAN;  // image 1, pixel (2, 3), channel 1
        const ConvTensors ct = conv_tensors(c, d, t);
        const std::vector<float> y = with_onednn(on, [&] { return values(fused_conv_op(c, ct)); });
        const std::vector<float> want =
            with_onednn(on, [&] { return values(unfused_conv(c, ct)); });
        int nans = 0;
        for (size_t i = 0; i < y.size(); ++i) {
          nans += std::isnan(y[i]);
          EXPECT_EQ(std::isnan(y[i]), std::isnan(want[i]))
              << dtype_name(t) << " " << act << " oneDNN " << on << " element " << i;
        }
        EXPECT_EQ(nans, 9 * 8) << dtype_name(t) << " " << act << " oneDNN " << on;
        // The dot: row 2 of a holds a NaN.
        std::vector<float> a(4 * 64, 0.5f), b(64 * 16, -0.25f), bias(16, 1.0f);
        a[2 * 64 + 7] = NAN;
        const std::vector<float> dv = with_onednn(on, [&] {
          return values(call_op("fused_dot",
                                {convert(Tensor::from_vector(a, {4, 64}), t),
                                 convert(Tensor::from_vector(b, {64, 16}), t),
                                 convert(Tensor::from_vector(bias, {16}), t)},
                                {{"lhs_contract", std::vector<int64_t>{1}},
                                 {"rhs_contract", std::vector<int64_t>{0}},
                                 {"activation", std::string(act)}})[0]);
        });
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 16; ++j)
            EXPECT_EQ(std::isnan(dv[i * 16 + j]), i == 2)
                << "fused_dot " << dtype_name(t) << " " << act << " oneDNN " << on << " (" << i
                << "," << j << ") = " << dv[i * 16 + j];
      }
}

// ---- compiled and interpreted ----

// A graph act(conv(x, w) + b) in bf16 and f16, compiled: the pass fuses it into one fused_conv
// kernel thunk (bf16: one oneDNN kernel where the host has a bf16 unit), within the bound of the
// interpreter's separate ops.
TEST(LowpEpilogue, CompiledConvGraphIsOneFusedKernelWithinBoundOfInterpreter) {
  std::mt19937 rng(59);
  for (DType t : {bf16, f16})
    for (const char* act : {"relu", "tanh", "logistic"}) {
      const ConvCase c{false,         3,  5, 16, 1, {9, 8}, {3, 3}, {2, 1}, {1, 1}, {1, 0}, {1, 1},
                       Bias::kVector, act};
      const ConvData d = random_conv_data(c, t, rng);
      const ConvTensors ct = conv_tensors(c, d, t);
      Graph g("lowp_conv_layer");
      Tensor px = g.placeholder(t, c.x_shape(), "x"), pw = g.placeholder(t, c.w_shape(), "w");
      Tensor pb = g.placeholder(t, c.bias_shape(), "b");
      Tensor y = apply_activation(c.act, conv(px, pw, c.options()) + pb);
      const FeedList feeds = {{px, ct.x}, {pw, ct.w}, {pb, ct.bias}};
      const std::vector<float> interpreted = values(g.run(feeds, y));
      compiler::Executable exe = compiler::compile(g, {y}, feeds);
      std::string thunks;
      for (const std::string& th : exe.thunk_descriptions()) thunks += th + "\n";
      EXPECT_EQ(exe.thunk_descriptions().size(), 1u) << thunks;
      EXPECT_NE(thunks.find("kernel fused_conv"), std::string::npos) << thunks;
      const int64_t before = fused_conv_count();
      const std::vector<float> compiled = values(exe.run(feeds)[0]);
      EXPECT_EQ(fused_conv_count() - before, t == bf16 && expect_onednn_bf16() ? 1 : 0)
          << dtype_name(t) << " " << act;
      check_conv(c, d, t, compiled, interpreted, std::string("compiled ") + dtype_name(t));
      // The optimized graph run by the interpreter: its fused_conv node, the same kernel.
      const compiler::CompiledGraph optimized = compiler::optimize(g, {y});
      EXPECT_EQ(values(optimized.run(feeds)[0]), compiled) << dtype_name(t) << " " << act;
    }
}

// Under mixed_bfloat16 and mixed_float16 a Conv2D layer with its bias and relu compiles to one
// fused_conv kernel (its inputs and variables cast to the compute dtype by loops before it).
TEST(LowpEpilogue, CompiledMixedPolicyConv2DLayerIsOneFusedConvKernel) {
  for (const char* policy : {"mixed_bfloat16", "mixed_float16"}) {
    nn::set_global_policy(policy);
    nn::Conv2D layer(8, {3, 3}, "relu");
    nn::set_global_policy("float32");
    const DType t = std::string(policy) == "mixed_bfloat16" ? bf16 : f16;
    Tensor x = random_uniform({4, 10, 10, 3}, 61, -1, 1);
    layer(x);  // builds the weights
    Graph g("mixed_conv2d");
    Tensor p, y;
    {
      auto guard = g.as_default();
      p = g.placeholder(f32, x.shape(), "x");
      nn::CallContext ctx(false, Tensor::scalar<int64_t>(0),
                          [](const Variable& v) { return v.value(); });
      y = layer(p, ctx);
    }
    ASSERT_EQ(y.dtype(), t) << policy;
    const FeedList feeds = {{p, x}};
    compiler::Executable exe = compiler::compile(g, {y}, feeds);
    int convs = 0, fused = 0;
    std::string thunks;
    for (const std::string& th : exe.thunk_descriptions()) {
      thunks += th + "\n";
      convs += th.find("convolution") != std::string::npos;
      fused += th.find("kernel fused_conv") != std::string::npos;
    }
    EXPECT_EQ(fused, 1) << policy << "\n" << thunks;
    EXPECT_EQ(convs, 0) << policy << "\n" << thunks;
    // Nothing runs after it: the bias and relu are in it.
    EXPECT_NE(exe.thunk_descriptions().back().find("kernel fused_conv"), std::string::npos)
        << policy << "\n"
        << thunks;
    std::cout << "[ thunks   ] " << policy << ":\n" << thunks;
    const int64_t before = fused_conv_count();
    const std::vector<float> compiled = values(exe.run(feeds)[0]);
    EXPECT_EQ(fused_conv_count() - before, t == bf16 && expect_onednn_bf16() ? 1 : 0) << policy;
    // Within the bound of the interpreter, from the operands as the layer rounds them.
    const std::vector<Variable>& w = layer.weights();
    ConvCase c{false,         4,     3, 8, 1, {10, 10}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {1, 1},
               Bias::kVector, "relu"};
    ConvData d{values(convert(x, t)), values(convert(w[0].value(), t)),
               values(convert(w[1].value(), t))};
    check_conv(c, d, t, compiled, values(g.run(feeds, y)), std::string("compiled ") + policy);
  }
}

}  // namespace
}  // namespace kiln

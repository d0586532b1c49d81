// Stateless random numbers: random_uniform, random_normal and random_bernoulli. Element i is
// a function of (seed, i) alone — Philox-4x32-10 keyed by the seed with counter i — so values
// never depend on the rest of the shape, the thread count or the run.
#include <cmath>
#include <limits>
#include <numbers>

#include "kiln/ops.h"
#include "ops/kernel_util.h"
#include "ops/philox.h"
#include "src/core/cpu_isa.h"
#include "src/core/float16_rounding.h"

namespace kiln {
namespace ops {
namespace {

// The 128 random bits of element i.
PhiloxCounter element_bits(uint64_t seed, int64_t i) {
  auto index = static_cast<uint64_t>(i);
  return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// The top `bits` (<= 53) of the 64-bit word hi:lo as a double in [0, 1), exactly.
double unit_interval(uint32_t hi, uint32_t lo, int bits) {
  uint64_t word = (uint64_t{hi} << 32) | lo;
  // A power-of-two scale is exact, and much cheaper than ldexp's libm call.
  return static_cast<double>(word >> (64 - bits)) / static_cast<double>(uint64_t{1} << bits);
}

// Significand precision of the float types: a uniform with this many bits is exact in T.
template <class T>
constexpr int mantissa_bits() {
  if constexpr (std::is_same_v<T, half>) return 11;
  if constexpr (std::is_same_v<T, bfloat16>) return 8;
  return std::numeric_limits<T>::digits;
}

// The next value of T toward minus infinity (T finite).
template <class T>
T step_down(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  } else {  // half and bfloat16: sign-magnitude 16-bit patterns
    T out = v;
    if ((v.bits & 0x7fff) == 0) {
      out.bits = 0x8001;  // ±0 -> the smallest negative value
    } else if (v.bits & 0x8000) {
      ++out.bits;  // negative: a larger magnitude
    } else {
      --out.bits;
    }
    return out;
  }
}

// low + (high - low) * u in T, kept below `high` when rounding to T would reach it.
template <class T>
T uniform_value(double u, double low, double high) {
  T v = float_cast<T>(low + (high - low) * u);
  while (static_cast<double>(static_cast<ComputeType<T>>(v)) >= high) v = step_down(v);
  return v;
}

// Box–Muller on two 53-bit uniforms: u1 in (0, 1] keeps the logarithm finite.
double normal_value(const PhiloxCounter& r) {
  double u1 = 1.0 - unit_interval(r[0], r[1], 53);
  double u2 = unit_interval(r[2], r[3], 53);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void require_finite(const InferContext& ctx, const char* name, double v) {
  if (!std::isfinite(v)) ctx.fail(std::string(name) + " must be finite, got " + std::to_string(v));
}

// Shared checks: a scalar i64 seed and a fully known, non-negative "shape" attribute.
ShapeFn random_shape(DType default_dtype, TypeSet dtypes,
                     std::function<void(const InferContext&)> check_params) {
  return [=](const InferContext& ctx) {
    const TensorType& seed = ctx.input(0);
    if (seed.dtype != i64 || !seed.shape.empty()) {
      ctx.fail("the seed must be an i64 scalar, got " + seed.str());
    }
    // With a second input the output takes its shape (known only at run time, maybe).
    const Shape& shape =
        ctx.num_inputs() > 1 ? ctx.input(1).shape : ctx.attrs().get_ints("shape");
    for (size_t d = 0; d < shape.size() && ctx.num_inputs() == 1; ++d) {
      if (shape[d] < 0) {
        ctx.fail("shape dimensions must be known and non-negative, dimension " + std::to_string(d) +
                 " is " + std::to_string(shape[d]));
      }
    }
    DType dtype = ctx.attrs().has("dtype") ? ctx.attrs().get_dtype("dtype") : default_dtype;
    if (!dtype_in(dtypes, dtype)) {
      ctx.fail(std::string("dtype must be ") + type_set_name(dtypes) + ", got " +
               dtype_name(dtype));
    }
    check_params(ctx);
    return std::vector<TensorType>{{dtype, shape}};
  };
}

// Fills output 0 with value(element_bits(seed, i)) converted to the output's dtype, the loop
// compiled for the host's vector ISA (cpu::dispatch): Philox's 32-bit products vectorize.
template <TypeSet S, class F>
void fill_random(KernelContext& ctx, F value) {
  // Read the seed directly: item() goes through double and would round large seeds.
  auto seed = static_cast<uint64_t>(ctx.input(0).data<int64_t>()[0]);
  Tensor& out = ctx.allocate_output(0);
  visit_in<S>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = out_ptr<T>(out);
    runtime::parallel_for(out.size(), 1 << 12, [&](int64_t b, int64_t e) {
      cpu::dispatch([&] {
        for (int64_t i = b; i < e; ++i) y[i] = value(tag, element_bits(seed, i));
      });
    });
  });
}

}  // namespace

KILN_REGISTER_OP(random_uniform)
    .input("seed")
    .optional_input("shape_like")
    .shape_only("shape_like")
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn(random_shape(f32, TypeSet::kFloat, [](const InferContext& ctx) {
      double low = ctx.attrs().get_float("low", 0), high = ctx.attrs().get_float("high", 1);
      require_finite(ctx, "low", low);
      require_finite(ctx, "high", high);
      require_finite(ctx, "high - low", high - low);
      if (!(low < high)) {
        ctx.fail("low must be less than high, got low=" + std::to_string(low) +
                 ", high=" + std::to_string(high));
      }
    }));
KILN_REGISTER_KERNEL(random_uniform).fn([](KernelContext& ctx) {
  double low = ctx.attrs().get_float("low", 0), high = ctx.attrs().get_float("high", 1);
  fill_random<TypeSet::kFloat>(ctx, [&](auto tag, const PhiloxCounter& r) {
    using T = typename decltype(tag)::type;
    return uniform_value<T>(unit_interval(r[0], r[1], mantissa_bits<T>()), low, high);
  });
});

KILN_REGISTER_OP(random_normal)
    .input("seed")
    .optional_input("shape_like")
    .shape_only("shape_like")
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn(random_shape(f32, TypeSet::kFloat, [](const InferContext& ctx) {
      double mean = ctx.attrs().get_float("mean", 0), stddev = ctx.attrs().get_float("stddev", 1);
      require_finite(ctx, "mean", mean);
      require_finite(ctx, "stddev", stddev);
      if (stddev < 0) ctx.fail("stddev must be non-negative, got " + std::to_string(stddev));
    }));
KILN_REGISTER_KERNEL(random_normal).fn([](KernelContext& ctx) {
  double mean = ctx.attrs().get_float("mean", 0), stddev = ctx.attrs().get_float("stddev", 1);
  fill_random<TypeSet::kFloat>(ctx, [&](auto tag, const PhiloxCounter& r) {
    using T = typename decltype(tag)::type;
    return float_cast<T>(mean + stddev * normal_value(r));
  });
});

KILN_REGISTER_OP(random_bernoulli)
    .input("seed")
    .optional_input("shape_like")
    .shape_only("shape_like")
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn(random_shape(bool_, TypeSet::kAll, [](const InferContext& ctx) {
      double p = ctx.attrs().get_float("p", 0.5);
      if (!(p >= 0 && p <= 1)) ctx.fail("p must be in [0, 1], got " + std::to_string(p));
    }));
KILN_REGISTER_KERNEL(random_bernoulli).fn([](KernelContext& ctx) {
  const double p = ctx.attrs().get_float("p", 0.5);
  // unit_interval(r[0], r[1], 53) < p, in integers: the uniform is k / 2^53 for the integer
  // k = word >> 11, and p 2^53 is exact, so u < p exactly when k < ceil(p 2^53).
  const auto threshold = static_cast<uint64_t>(std::ceil(p * 0x1p53));
  fill_random<TypeSet::kAll>(ctx, [&](auto tag, const PhiloxCounter& r) {
    using T = typename decltype(tag)::type;
    bool hit = (((uint64_t{r[0]} << 32) | r[1]) >> 11) < threshold;
    if constexpr (std::is_same_v<T, bool>) {
      return hit;
    } else {
      return static_cast<T>(static_cast<ComputeType<T>>(hit ? 1 : 0));
    }
  });
});

}  // namespace ops

// ---- public functions -------------------------------------------------------------------
namespace {

Tensor seed_tensor(uint64_t seed) { return Tensor::scalar(static_cast<int64_t>(seed)); }

// Any integer seed is accepted and widened to the i64 the primitives take.
Tensor as_seed(const Tensor& seed) {
  return seed.defined() && is_integer(seed.dtype()) ? convert(seed, i64) : seed;
}

Tensor call_random(const std::string& op, const Tensor& seed, Attrs attrs) {
  return call_op(op, {as_seed(seed)}, attrs)[0];
}

Tensor call_random_like(const std::string& op, const Tensor& like, const Tensor& seed,
                        Attrs attrs) {
  return call_op(op, {as_seed(seed), like}, attrs)[0];
}

}  // namespace

Tensor random_uniform(Shape shape, const Tensor& seed, double low, double high, DType dtype) {
  return call_random("random_uniform", seed,
                     {{"shape", shape}, {"dtype", dtype}, {"low", low}, {"high", high}});
}
Tensor random_normal(Shape shape, const Tensor& seed, double mean, double stddev, DType dtype) {
  return call_random("random_normal", seed,
                     {{"shape", shape}, {"dtype", dtype}, {"mean", mean}, {"stddev", stddev}});
}
Tensor random_bernoulli(Shape shape, const Tensor& seed, double p, DType dtype) {
  return call_random("random_bernoulli", seed, {{"shape", shape}, {"dtype", dtype}, {"p", p}});
}

Tensor random_uniform_like(const Tensor& like, const Tensor& seed, double low, double high,
                          DType dtype) {
  return call_random_like("random_uniform", like, seed,
                          {{"dtype", dtype}, {"low", low}, {"high", high}});
}
Tensor random_normal_like(const Tensor& like, const Tensor& seed, double mean, double stddev,
                          DType dtype) {
  return call_random_like("random_normal", like, seed,
                          {{"dtype", dtype}, {"mean", mean}, {"stddev", stddev}});
}
Tensor random_bernoulli_like(const Tensor& like, const Tensor& seed, double p, DType dtype) {
  return call_random_like("random_bernoulli", like, seed, {{"dtype", dtype}, {"p", p}});
}

Tensor random_uniform(Shape shape, uint64_t seed, double low, double high, DType dtype) {
  return random_uniform(std::move(shape), seed_tensor(seed), low, high, dtype);
}
Tensor random_normal(Shape shape, uint64_t seed, double mean, double stddev, DType dtype) {
  return random_normal(std::move(shape), seed_tensor(seed), mean, stddev, dtype);
}
Tensor random_bernoulli(Shape shape, uint64_t seed, double p, DType dtype) {
  return random_bernoulli(std::move(shape), seed_tensor(seed), p, dtype);
}

}  // namespace kiln

// Generators (compiler/generator.h): the constants that let a loop reproduce the random ops'
// kernels (ops/random.cc) bit for bit.
#include "compiler/generator.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace kiln::compiler {
namespace {

// The largest value of T (float or double) below `high`.
template <class T>
double largest_below(double high) {
  T v = static_cast<T>(high);
  while (static_cast<double>(v) >= high) v = std::nextafter(v, -std::numeric_limits<T>::infinity());
  return static_cast<double>(v);
}

}  // namespace

bool is_generator_op(const std::string& op) {
  return op == "random_bernoulli" || op == "random_uniform" || op == "random_normal";
}

std::optional<Generator> generator_of(const std::string& op, const Attrs& attrs, DType dtype,
                                      std::string* why) {
  Generator g;
  if (op == "random_bernoulli") {
    g.kind = Generator::Kind::kBernoulli;
    g.threshold = static_cast<uint64_t>(std::ceil(attrs.get_float("p", 0.5) * 0x1p53));
    return g;
  }
  if (op == "random_uniform" || op == "random_normal") {
    if (dtype != f32 && dtype != f64) {
      *why = op + " in " + dtype_name(dtype) +
             " rounds an f64 once to 16 bits, which loops do not (left to the kernel)";
      return std::nullopt;
    }
    if (op == "random_normal") {
      g.kind = Generator::Kind::kNormal;
      g.mean = attrs.get_float("mean", 0);
      g.stddev = attrs.get_float("stddev", 1);
      return g;
    }
    g.kind = Generator::Kind::kUniform;
    g.low = attrs.get_float("low", 0);
    g.high = attrs.get_float("high", 1);
    g.span = g.high - g.low;
    g.bits = dtype == f32 ? std::numeric_limits<float>::digits : std::numeric_limits<double>::digits;
    g.below_high = dtype == f32 ? largest_below<float>(g.high) : largest_below<double>(g.high);
    return g;
  }
  *why = "op " + op + " is not a generator";
  return std::nullopt;
}

std::string Generator::key() const {
  char buf[256];
  // %a prints doubles exactly.
  std::snprintf(buf, sizeof buf, "gen%d:%llu:%d:%a:%a:%a:%a:%a:%a", static_cast<int>(kind),
                static_cast<unsigned long long>(threshold), bits, low, span, high, below_high, mean,
                stddev);
  return buf;
}

}  // namespace kiln::compiler

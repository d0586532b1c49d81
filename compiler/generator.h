// Generators: ops whose element i is a function of a scalar seed and i alone, so a fused loop
// computes each element where it is read instead of reading a buffer the op's kernel filled.
// The stateless random ops qualify (ops/random.cc: Philox-4x32-10 keyed by the seed, counter
// i). A loop reads one as a generated input of its FusedSubgraph (compiler/fused_subgraph.h):
// its buffer is the seed, and the emitter computes the kernel's bits from (seed, index), so
// fusing one changes no value. Like XLA's elemental Rng, this keeps a dropout mask out of
// memory, and on a device it means no host kernel and no copy of the mask each step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/attrs.h"
#include "kiln/dtype.h"

namespace kiln::compiler {

struct Generator {
  enum class Kind : uint8_t {
    kBernoulli,  // 1 where the element's top 53 bits, as k / 2^53, are below p; 0 elsewhere
    kUniform,    // low + (high - low) u in [low, high), u from the top mantissa bits
    kNormal,     // mean + stddev n, n from Box-Muller on two 53-bit uniforms (f64 log, cos)
  };
  Kind kind = Kind::kBernoulli;
  // kBernoulli: the element is 1 when (word >> 11) < threshold (= ceil(p 2^53)).
  uint64_t threshold = 0;
  // kUniform: u = (word >> (64 - bits)) * 2^-bits; v = T(low + span u), where span = high - low
  // in f64; a v that reaches `high` (compared in f64) becomes `below_high`, the largest T below
  // high (what the kernel's step-down loop ends at).
  int bits = 0;
  double low = 0, span = 0, high = 0, below_high = 0;
  // kNormal: v = T(mean + stddev * sqrt(-2 log(u1)) * cos(2 pi u2)), in f64, where u1 = 1 - the
  // top 53 bits of word r0:r1 as a fraction (in (0, 1]) and u2 those of r2:r3 (libm's log and
  // cos on the host, libdevice's on a GPU, whose last bits may differ).
  double mean = 0, stddev = 1;

  // Every field, for kernel cache keys.
  std::string key() const;
  bool operator==(const Generator&) const = default;
};

// The generator computing op `op`'s output of dtype `dtype` with attributes `attrs`, or
// nullopt with the reason in *why: not a generator op, or a dtype whose kernel rounds in a way
// the loop does not reproduce (random_uniform and random_normal in bf16 or f16 round an f64
// once to 16 bits).
std::optional<Generator> generator_of(const std::string& op, const Attrs& attrs, DType dtype,
                                      std::string* why);

// Whether `op` is one the loops may generate (for some dtypes): random_bernoulli,
// random_uniform and random_normal.
bool is_generator_op(const std::string& op);

}  // namespace kiln::compiler

// Control flow: cond, while_loop, scan and fori_loop (tf.cond and tf.while_loop; JAX's
// lax.cond, lax.while_loop, lax.scan and lax.fori_loop). The functions are C++ callables.
// Eagerly (concrete operands, no graph being recorded) they just run: cond calls one branch,
// while_loop and fori_loop loop in C++, scan steps over the xs. While a graph is recorded (a
// symbolic operand, inside kiln::function, value_and_grad or a Graph's as_default) each
// function is traced once into a sub-graph held by one node (ops "cond", "while", "scan"),
// which the interpreter runs, the compiler compiles with its own fusion, and saved models,
// to_text and KILN_DUMP show. Values of the enclosing graph a function uses (weights, other
// tensors) become inputs of the node, and variables read or assigned inside behave as in
// kiln::function. Control flow nests.
//
// Loop-carried values and the results of cond's two branches keep their dtypes and shapes:
// a body or branch that changes one is a kiln::Error naming the value and both types.
//
// Gradients: cond (through the branch taken), scan (a reverse scan over residuals the forward
// scan saves, or, with ScanOptions::remat, recomputing each step's forward), fori_loop (a
// scan), and while_loop when given maximum_iterations. A while_loop without one is not
// differentiable: gradients() says so.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

using BranchFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& operands)>;

// pred (a bool scalar) ? true_fn(operands) : false_fn(operands). Both return the same number
// of values, with the same dtypes and shapes.
std::vector<Tensor> cond(const Tensor& pred, const BranchFn& true_fn, const BranchFn& false_fn,
                         const std::vector<Tensor>& operands);

struct WhileOptions {
  // Stops the loop after this many iterations even while cond_fn holds (tf.while_loop's
  // maximum_iterations). Needed to differentiate the loop.
  std::optional<int64_t> maximum_iterations;
  std::string name = "while";
};

using LoopCondFn = std::function<Tensor(const std::vector<Tensor>& vars)>;

// vars = loop_vars; while (cond_fn(vars)) vars = body_fn(vars); returns vars. cond_fn returns
// a bool scalar; body_fn returns as many values as it takes, of the same dtypes and shapes.
std::vector<Tensor> while_loop(const LoopCondFn& cond_fn, const BranchFn& body_fn,
                               const std::vector<Tensor>& loop_vars,
                               const WhileOptions& options = {});

struct ScanOptions {
  bool reverse = false;  // step from the last row of the xs to the first (ys keep xs' order)
  // Steps per iteration of the compiled loop (a body unrolled this many times; 1: none; the
  // whole length or more: no loop at all). The compiler also unrolls small loops on its own
  // (compiler/passes/unroll.h). Unrolling never changes the values, only the code.
  int64_t unroll = 1;
  // The number of steps when there are no xs (with xs it must equal their first dimension).
  std::optional<int64_t> length;
  // For gradients: recompute each step's forward in the backward scan instead of saving its
  // intermediate values (jax.checkpoint): less memory, one more forward pass.
  bool remat = false;
  std::string name = "scan";
};

struct ScanResult {
  std::vector<Tensor> carry;  // the final carry
  std::vector<Tensor> ys;     // each step's outputs, stacked along a new first dimension
};

// One step: (carry, this step's rows of the xs) -> (new carry, this step's outputs).
using ScanFn = std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(
    const std::vector<Tensor>& carry, const std::vector<Tensor>& x)>;

// lax.scan: carry = init; for t in 0..length: (carry, y[t]) = fn(carry, xs[:, t] rows); returns
// the final carry and the stacked ys. xs are stepped along their first dimension.
ScanResult scan(const ScanFn& fn, const std::vector<Tensor>& init, const std::vector<Tensor>& xs,
                const ScanOptions& options = {});

using ForiFn = std::function<std::vector<Tensor>(const Tensor& i, const std::vector<Tensor>& vars)>;

// for (i = lower; i < upper; ++i) vars = body(i, vars); i is an i64 scalar. A scan with a
// static trip count, so it is differentiable.
std::vector<Tensor> fori_loop(int64_t lower, int64_t upper, const ForiFn& body,
                              const std::vector<Tensor>& init, const ScanOptions& options = {});

}  // namespace kiln

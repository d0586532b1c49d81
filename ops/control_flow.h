// The control-flow ops cond, while and scan (kiln/control_flow.h builds them): their type
// rules and the loops that run them. A loop calls its sub-graphs through a SubRunner, so the
// reference kernels (which interpret the sub-graphs) and the compiler's control-flow thunks
// (which run them compiled, compiler/control_flow.cc) share one implementation of the
// semantics.
#pragma once

#include <functional>
#include <vector>

#include "kiln/graph.h"
#include "kiln/op_registry.h"

namespace kiln::ops {

// The result types of `sub` when its params have `params`' types (more concrete than those it
// was traced with, e.g. a batch dimension known only at run time).
std::vector<TensorType> infer_subgraph(const SubGraph& sub, const std::vector<TensorType>& params,
                                       const std::string& node);

// Whether a and b can be the same type: equal dtypes and ranks, and each dimension equal or
// unknown (kUnknownDim) in one of them.
bool types_compatible(const TensorType& a, const TensorType& b);

// Row t of x's first dimension (a view sharing x's storage): scan's step through its xs.
Tensor row_view(const Tensor& x, int64_t t);

// Runs one sub-graph: takes its params' values (in order, moved in so a compiled body may
// update loop-carried buffers in place) and returns its results.
using SubRunner = std::function<std::vector<Tensor>(std::vector<Tensor>&& args)>;

// The sub-graph attributes each op holds, in the order the runners below take them.
//   cond:  "then_branch", "else_branch"
//   while: "cond", "body"
//   scan:  "body"
void run_cond(KernelContext& ctx, const SubRunner& then_branch, const SubRunner& else_branch);
void run_while(KernelContext& ctx, const SubRunner& cond, const SubRunner& body);
void run_scan(KernelContext& ctx, const SubRunner& body);

// ---- replaying a sub-graph into the graph being recorded (the default graph) ----

// Records the nodes of `sub` that `wanted` selects (all when null) into the default graph, in
// order. `values` holds, per node, the values standing for its outputs: filled in for the
// params (and anything else mapped) beforehand, and for each replayed node here.
void replay(const SubGraph& sub, std::vector<std::vector<Tensor>>& values,
            const std::vector<bool>* wanted);

// Which nodes of `sub` the values `roots` depend on.
std::vector<bool> needed_for(const SubGraph& sub, const std::vector<ValueRef>& roots);

// `sub` applied to `args` in the default graph: the nodes its results need, recorded in order;
// returns the values standing for its results.
std::vector<Tensor> inline_subgraph(const SubGraph& sub, const std::vector<Tensor>& args);

// Whether `op` is one of the control-flow ops (its node holds sub-graphs).
bool is_control_flow(const std::string& op);

}  // namespace kiln::ops

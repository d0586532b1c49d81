// The collective graph ops (all_reduce, all_gather, reduce_scatter, broadcast, reduce_to_root):
// registrations, kernels that call the thread's CollectiveScope communicator, gradient rules and
// the public functions of kiln/distribute/ops.h. Registered here, above ops/, since they need
// the Collective; kernel ops, so the compiler runs them as kernel thunks.
#include <cstring>
#include <string>
#include <vector>

#include "kiln/distribute/ops.h"
#include "kiln/error.h"
#include "kiln/op_registry.h"
#include "kiln/ops.h"

namespace kiln::distribute {
namespace {

thread_local Collective* t_current = nullptr;

ReduceOp parse_reduce_op(const std::string& name, const std::string& op) {
  for (ReduceOp r : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
    if (name == reduce_op_name(r)) return r;
  }
  throw Error(ErrorCode::kInvalidArgument,
              op + ": unknown reduction '" + name + "' (expected sum, mean, max or min)");
}

Collective& communicator(const KernelContext& ctx) {
  if (t_current == nullptr) {
    ctx.fail(
        "no communicator on this thread: run it inside a kiln::distribute::CollectiveScope "
        "on each replica's thread",
        ErrorCode::kFailedPrecondition);
  }
  return *t_current;
}

Collective& communicator_for_shape(const KernelContext& ctx) {
  Collective& comm = communicator(ctx);
  int64_t replicas = ctx.attrs().get_int("replicas");
  if (comm.size() != replicas) {
    ctx.fail("recorded for " + std::to_string(replicas) + " replicas, run on a communicator of " +
             std::to_string(comm.size()));
  }
  return comm;
}

// Copies `value` into a buffer of this node's own: the in-process backend shares one result
// among the replicas, and a compiled step may later write into its node's buffer in place.
void set_copied_output(KernelContext& ctx, const Tensor& value) {
  Tensor& out = ctx.allocate_output(0);
  if (out.shape() != value.shape() || out.dtype() != value.dtype()) {
    ctx.fail("the collective's result differs from the inferred type", ErrorCode::kInternal);
  }
  if (value.nbytes() > 0) std::memcpy(out.raw_mutable_data(), value.raw_data(), value.nbytes());
}

std::vector<TensorType> same_type(const InferContext& ctx) { return {ctx.input(0)}; }

std::vector<TensorType> gathered_type(const InferContext& ctx) {
  TensorType t = ctx.input(0);
  if (t.shape.empty()) ctx.fail("needs an input of rank 1 or more (it gathers along axis 0)");
  int64_t replicas = ctx.attrs().get_int("replicas");
  if (t.shape[0] != kUnknownDim) t.shape[0] *= replicas;
  return {t};
}

std::vector<TensorType> scattered_type(const InferContext& ctx) {
  TensorType t = ctx.input(0);
  if (t.shape.empty()) ctx.fail("needs an input of rank 1 or more (it scatters along axis 0)");
  int64_t replicas = ctx.attrs().get_int("replicas");
  if (t.shape[0] != kUnknownDim) {
    if (t.shape[0] % replicas != 0) {
      ctx.fail("dimension 0 (" + std::to_string(t.shape[0]) + ") is not a multiple of the " +
               std::to_string(replicas) + " replicas");
    }
    t.shape[0] /= replicas;
  }
  return {t};
}

int64_t replicas_for_recording(const std::string& op) {
  if (t_current == nullptr) {
    throw Error(ErrorCode::kFailedPrecondition,
                op + ": no communicator on this thread: run it inside a "
                     "kiln::distribute::CollectiveScope (its result's dimension 0 depends on the "
                     "number of replicas)");
  }
  return t_current->size();
}

// ---- kernels ---------------------------------------------------------------------------------

void all_reduce_kernel(KernelContext& ctx) {
  ReduceOp op = parse_reduce_op(ctx.attrs().get_string("op"), ctx.op());
  set_copied_output(ctx, communicator(ctx).all_reduce(ctx.input(0), op));
}

void all_gather_kernel(KernelContext& ctx) {
  set_copied_output(ctx, communicator_for_shape(ctx).all_gather(ctx.input(0)));
}

void reduce_scatter_kernel(KernelContext& ctx) {
  ReduceOp op = parse_reduce_op(ctx.attrs().get_string("op"), ctx.op());
  set_copied_output(ctx, communicator_for_shape(ctx).reduce_scatter(ctx.input(0), op));
}

void broadcast_kernel(KernelContext& ctx) {
  int root = static_cast<int>(ctx.attrs().get_int("root"));
  set_copied_output(ctx, communicator(ctx).broadcast(ctx.input(0), root));
}

// The asynchronous all_reduce: the start hands x to the communicator's thread and outputs the
// collective's step (an i64 scalar, the token); the done waits for that step's result. The done
// also reads x, so a compiled step keeps x's buffer (which the communication reads) alive and
// unchanged until then.
void all_reduce_start_kernel(KernelContext& ctx) {
  ReduceOp op = parse_reduce_op(ctx.attrs().get_string("op"), ctx.op());
  const int64_t step = communicator(ctx).start_all_reduce(ctx.input(0), op);
  Tensor& token = ctx.allocate_output(0);
  std::memcpy(token.raw_mutable_data(), &step, sizeof step);
}

void all_reduce_done_kernel(KernelContext& ctx) {
  int64_t step = 0;
  std::memcpy(&step, ctx.input(0).raw_data(), sizeof step);
  set_copied_output(ctx, communicator(ctx).wait(step));
}

std::vector<TensorType> token_type(const InferContext&) { return {TensorType{DType::i64, {}}}; }

std::vector<TensorType> done_type(const InferContext& ctx) {
  if (ctx.input(0).dtype != DType::i64 || !ctx.input(0).shape.empty()) {
    ctx.fail("input 0 must be the i64[] token of an all_reduce_start, got " + ctx.input(0).str());
  }
  return {ctx.input(1)};
}

// The sum of every replica's input on `root`; zeros on the others.
void reduce_to_root_kernel(KernelContext& ctx) {
  Collective& comm = communicator(ctx);
  int root = static_cast<int>(ctx.attrs().get_int("root"));
  if (root < 0 || root >= comm.size()) {
    // The same on every replica, before any of them waits on the others.
    ctx.fail("root " + std::to_string(root) + " is not a rank of " + std::to_string(comm.size()) +
             (comm.size() == 1 ? " replica" : " replicas"));
  }
  Tensor sum = comm.all_reduce(ctx.input(0), ReduceOp::kSum);
  if (comm.rank() == root) {
    set_copied_output(ctx, sum);
    return;
  }
  Tensor& out = ctx.allocate_output(0);
  if (out.nbytes() > 0) std::memset(out.raw_mutable_data(), 0, out.nbytes());
}

// ---- gradients -------------------------------------------------------------------------------

Tensor record(const std::string& op, const Tensor& x, const Attrs& attrs) {
  return call_op(op, {x}, attrs)[0];
}

std::vector<Tensor> all_reduce_gradient(const GradContext& g) {
  const std::string& op = g.attrs().get_string("op");
  if (op != "sum" && op != "mean") {
    throw Error(
        ErrorCode::kUnimplemented,
        "all_reduce " + op + " has no gradient (only sum and mean do) (in " + g.node.name + ")");
  }
  std::vector<Tensor> grads = {record("all_reduce", g.output_grads[0], {{"op", op}})};
  grads.resize(g.node.inputs.size());  // none for the ordering input `after`
  return grads;
}

std::vector<Tensor> all_gather_gradient(const GradContext& g) {
  return {record("reduce_scatter", g.output_grads[0],
                 {{"op", std::string("sum")}, {"replicas", g.attrs().get_int("replicas")}})};
}

std::vector<Tensor> reduce_scatter_gradient(const GradContext& g) {
  const std::string& op = g.attrs().get_string("op");
  int64_t replicas = g.attrs().get_int("replicas");
  if (op != "sum" && op != "mean") {
    throw Error(ErrorCode::kUnimplemented, "reduce_scatter " + op +
                                               " has no gradient (only sum and mean do) (in " +
                                               g.node.name + ")");
  }
  Tensor dx = record("all_gather", g.output_grads[0], {{"replicas", replicas}});
  if (op == "mean") dx = dx * (1.0 / static_cast<double>(replicas));
  return {dx};
}

std::vector<Tensor> broadcast_gradient(const GradContext& g) {
  return {record("reduce_to_root", g.output_grads[0], {{"root", g.attrs().get_int("root")}})};
}

std::vector<Tensor> reduce_to_root_gradient(const GradContext& g) {
  return {record("broadcast", g.output_grads[0], {{"root", g.attrs().get_int("root")}})};
}

// Stateful: never constant-folded (that would run a collective while compiling) nor merged.
// all_reduce's optional `after` is read by nothing: an input that orders it after another
// collective the same way on every replica.
KILN_REGISTER_OP(all_reduce)
    .input("x")
    .optional_input("after")
    .kind(OpKind::kKernel)
    .stateful()
    .shape_fn(same_type);
KILN_REGISTER_KERNEL(all_reduce).fn(all_reduce_kernel);
KILN_REGISTER_GRADIENT(all_reduce, all_reduce_gradient);

// all_reduce_in_buckets' split all_reduce (as XLA's all-reduce-start / all-reduce-done): the
// compiler runs each start as soon as its inputs exist and each done only where its result is
// first needed (compiler/schedule.h), so the communication overlaps the thunks between them.
// The start's optional `after` (another start's token) orders the starts alike on every replica.
KILN_REGISTER_OP(all_reduce_start)
    .input("x")
    .optional_input("after")
    .kind(OpKind::kKernel)
    .stateful()
    .non_differentiable()
    .shape_fn(token_type);
KILN_REGISTER_KERNEL(all_reduce_start).fn(all_reduce_start_kernel);

KILN_REGISTER_OP(all_reduce_done)
    .input("token")
    .input("x")
    .kind(OpKind::kKernel)
    .stateful()
    .non_differentiable()
    .shape_fn(done_type);
KILN_REGISTER_KERNEL(all_reduce_done).fn(all_reduce_done_kernel);

KILN_REGISTER_OP(all_gather).input("x").kind(OpKind::kKernel).stateful().shape_fn(gathered_type);
KILN_REGISTER_KERNEL(all_gather).fn(all_gather_kernel);
KILN_REGISTER_GRADIENT(all_gather, all_gather_gradient);

KILN_REGISTER_OP(reduce_scatter)
    .input("x")
    .kind(OpKind::kKernel)
    .stateful()
    .shape_fn(scattered_type);
KILN_REGISTER_KERNEL(reduce_scatter).fn(reduce_scatter_kernel);
KILN_REGISTER_GRADIENT(reduce_scatter, reduce_scatter_gradient);

KILN_REGISTER_OP(broadcast).input("x").kind(OpKind::kKernel).stateful().shape_fn(same_type);
KILN_REGISTER_KERNEL(broadcast).fn(broadcast_kernel);
KILN_REGISTER_GRADIENT(broadcast, broadcast_gradient);

KILN_REGISTER_OP(reduce_to_root).input("x").kind(OpKind::kKernel).stateful().shape_fn(same_type);
KILN_REGISTER_KERNEL(reduce_to_root).fn(reduce_to_root_kernel);
KILN_REGISTER_GRADIENT(reduce_to_root, reduce_to_root_gradient);

}  // namespace

CollectiveScope::CollectiveScope(Collective& comm) : previous_(t_current) { t_current = &comm; }
CollectiveScope::~CollectiveScope() { t_current = previous_; }

Collective* current_collective() { return t_current; }

Tensor all_reduce(const Tensor& x, ReduceOp op) {
  return call_op("all_reduce", {x}, {{"op", std::string(reduce_op_name(op))}})[0];
}

Tensor broadcast(const Tensor& x, int root) {
  return call_op("broadcast", {x}, {{"root", int64_t{root}}})[0];
}

Tensor all_gather(const Tensor& x) {
  return call_op("all_gather", {x}, {{"replicas", replicas_for_recording("all_gather")}})[0];
}

Tensor reduce_scatter(const Tensor& x, ReduceOp op) {
  return call_op("reduce_scatter", {x},
                 {{"op", std::string(reduce_op_name(op))},
                  {"replicas", replicas_for_recording("reduce_scatter")}})[0];
}

}  // namespace kiln::distribute

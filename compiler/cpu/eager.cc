// Eager ops through the compiler: an elementwise op on large flat operands (each input of the
// output's size or a single element) runs as a JIT'd kernel from the structural kernel cache,
// so eager code gets the same vectorised, multi-threaded loops as compiled programs. One
// kernel per (op, dtypes, scalar operands) serves every size. Smaller ops, broadcasting ops
// and everything else keep their reference kernels: a JIT compile (~10 ms) would cost more
// than it saves there.
#include "compiler/cpu/eager.h"

#include "compiler/cpu/kernel_cache.h"
#include "compiler/cpu/fusion_target.h"
#include "runtime/execute.h"

namespace kiln::compiler {

namespace {

bool run_eager(const OpDef& def, const std::vector<Tensor>& inputs, const Attrs& attrs,
               std::vector<Tensor>* outputs) {
  if (!def.elemental) return false;
  int64_t n = 1;
  for (const Tensor& t : inputs) n = std::max(n, t.size());
  if (n < kEagerCompileMinElements) return false;
  for (const Tensor& t : inputs)
    if (t.size() != n && t.size() != 1) return false;
  std::vector<TensorType> in_types;
  for (const Tensor& t : inputs) in_types.push_back({t.dtype(), t.shape()});
  // Validates the inputs with the op's own messages, and gives the result's type.
  std::vector<TensorType> out_types = runtime::infer_types(def, def.name, in_types, attrs);
  if (out_types.size() != 1 || num_elements(out_types[0].shape) != n) return false;
  FusedSubgraph sg;
  sg.name = "eager_" + def.name;
  std::vector<int> args;
  for (const TensorType& t : in_types) args.push_back(sg.add_input(t.dtype, t.shape));
  SubgraphBuilder b(sg, cpu::fusion_target());
  int v = b.apply_op(def, args, attrs);
  if (v == ElementalBuilder::kRefused) return false;  // a dtype the emitter does not compute
  if (sg.dtype(v) != out_types[0].dtype || sg.iteration_shape() != out_types[0].shape) return false;
  sg.add_output(v);
  *outputs = cached_kernel(sg).run(inputs);
  return true;
}

const bool kInstalled = [] {
  runtime::set_eager_runner(&run_eager);
  return true;
}();

}  // namespace

bool eager_runner_installed() { return kInstalled; }

}  // namespace kiln::compiler

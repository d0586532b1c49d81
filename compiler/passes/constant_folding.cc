// Evaluates constant subgraphs once, at compile time, with the same reference kernels the
// interpreter uses (so folding never changes a result).
#include "compiler/passes/constant_folding.h"

#include "kiln/error.h"
#include "runtime/execute.h"

namespace kiln::compiler {

bool ConstantFolding::run(Module& module) {
  Rewriter rw(module);
  bool changed = false;
  for (int id = 0; id < rw.num_old(); ++id) {
    const detail::Node& old = rw.old_node(id);
    bool all_constant = old.op != "constant";
    for (size_t i = 0; all_constant && i < old.inputs.size(); ++i) {
      all_constant = rw.input_node(id, static_cast<int>(i)).op == "constant";
    }
    if (!all_constant) {
      rw.keep(id);
      continue;
    }
    if (!is_pure(old)) {
      if (old.op != "placeholder") {
        note("'" + old.name + "' not folded: " + old.op + " is random or stateful");
      }
      rw.keep(id);
      continue;
    }
    if (old.outputs.size() != 1) {
      note("'" + old.name + "' not folded: it has " + std::to_string(old.outputs.size()) +
           " outputs");
      rw.keep(id);
      continue;
    }
    int64_t elements = num_elements(old.outputs[0].shape);
    if (elements < 0 || elements > max_elements_) {
      note("'" + old.name + "' not folded: its result " + old.outputs[0].str() + " has more than " +
           std::to_string(max_elements_) + " elements (the constant would be held in memory)");
      rw.keep(id);
      continue;
    }
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < old.inputs.size(); ++i) {
      inputs.push_back(rw.input_node(id, static_cast<int>(i)).attrs.get_tensor("value"));
    }
    std::vector<Tensor> result;
    try {
      const OpDef& def = old.def ? *old.def : OpRegistry::global().find(old.op);
      result = runtime::run_kernel(def, old.name, inputs, old.attrs);
    } catch (const Error& e) {
      // The interpreter would raise the same error at run time; leave it to happen there.
      note("'" + old.name + "' not folded: its kernel fails: " + e.what());
      rw.keep(id);
      continue;
    }
    if (result.size() != 1 || TensorType{result[0].dtype(), result[0].shape()} != old.outputs[0]) {
      note("'" + old.name + "' not folded: its kernel's result does not match " +
           old.outputs[0].str());
      rw.keep(id);
      continue;
    }
    rw.replace(id, constant_node(old.name, result[0]));
    changed = true;
  }
  if (!changed) return false;
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler

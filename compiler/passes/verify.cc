// Module invariants, checked before and after optimization.
#include "compiler/passes/verify.h"

#include "kiln/error.h"
#include "runtime/execute.h"

namespace kiln::compiler {
namespace {

std::string types_str(const std::vector<TensorType>& types) {
  std::string s = "(";
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i].str();
  return s + ")";
}

[[noreturn]] void fail(int id, const detail::Node& node, const std::string& message) {
  throw Error(ErrorCode::kInternal, "verify: node %" + std::to_string(id) + " '" + node.name +
                                        "' (" + node.op + "): " + message);
}

bool valid_ref(const std::vector<detail::Node>& nodes, ValueRef v, int before) {
  return v.node >= 0 && v.node < before && v.output >= 0 &&
         v.output < static_cast<int>(nodes[v.node].outputs.size());
}

}  // namespace

bool Verify::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  const int n = static_cast<int>(nodes.size());
  for (int id = 0; id < n; ++id) {
    const detail::Node& node = nodes[id];
    if (!OpRegistry::global().contains(node.op)) fail(id, node, "unknown op");
    std::vector<TensorType> in;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ValueRef v = node.inputs[i];
      if (!valid_ref(nodes, v, id)) {
        fail(id, node,
             "input " + std::to_string(i) + " refers to %" + std::to_string(v.node) + ":" +
                 std::to_string(v.output) + ", which is not an earlier value");
      }
      in.push_back(nodes[v.node].outputs[v.output]);
    }
    std::vector<TensorType> inferred;
    try {
      inferred =
          runtime::infer_types(OpRegistry::global().find(node.op), node.name, in, node.attrs);
    } catch (const Error& e) {
      fail(id, node, std::string("its shape function rejects its inputs: ") + e.what());
    }
    if (inferred != node.outputs) {
      fail(id, node,
           "recorded output types " + types_str(node.outputs) + " but its shape function gives " +
               types_str(inferred));
    }
  }
  for (size_t i = 0; i < module.outputs.size(); ++i) {
    if (!valid_ref(nodes, module.outputs[i], n)) {
      throw Error(ErrorCode::kInternal, "verify: output " + std::to_string(i) + " refers to %" +
                                            std::to_string(module.outputs[i].node) +
                                            ", which is not a value of the graph");
    }
  }
  for (const Module::Placeholder& p : module.placeholders) {
    if (p.current < 0 || p.current >= n || nodes[p.current].op != "placeholder") {
      throw Error(ErrorCode::kInternal, "verify: original placeholder %" +
                                            std::to_string(p.original) + " is lost (now %" +
                                            std::to_string(p.current) + ")");
    }
  }
  return false;
}

}  // namespace kiln::compiler

// export_model's internals, shared by the graph walk (interop/onnx_export.cc) and the emitters of
// the op table (interop/onnx_export_ops.cc): the ONNX graph being built, and the Kiln node being
// emitted.
#pragma once

#include <cstdint>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "interop/onnx_tensor.h"
#include "kiln/graph.h"
#include "kiln/ops.h"

namespace kiln::onnx::export_internal {

using Ints = std::vector<int64_t>;


// Thrown by an emitter for a node ONNX cannot express; export_model lists every one at once.
struct Unsupported {
  std::string why;
};

inline void set_attr(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void set_attr(::onnx::NodeProto* n, const std::string& name, const Ints& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// Dims of `shape` at `axes`.
inline Ints pick(const Ints& v, const Ints& axes) {
  Ints out;
  for (int64_t a : axes) out.push_back(v[a]);
  return out;
}

inline Ints concat(Ints a, const Ints& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline Ints inverse(const Ints& perm) {
  Ints inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

inline bool is_identity(const Ints& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

inline std::string ints_str(const Ints& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + ']';
}

inline Ints iota_ints(int64_t from, int64_t to) {
  Ints v(std::max<int64_t>(0, to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

// The ONNX graph being built: unique value and node names, initializers and their values.
class Builder {
 public:
  Builder(::onnx::GraphProto* graph, int64_t opset) : graph_(graph), opset_(opset) {}
  int64_t opset() const { return opset_; }

  // `base`, or `base` with the first free numeric suffix.
  std::string unique_value(const std::string& base) { return unique(values_, base); }
  bool claim_value(const std::string& name) { return values_.insert(name).second; }

  ::onnx::NodeProto* add_node(const std::string& op, const std::string& name,
                              const std::vector<std::string>& inputs,
                              const std::vector<std::string>& outputs) {
    ::onnx::NodeProto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(unique(nodes_, name));
    for (const std::string& i : inputs) n->add_input(i);
    for (const std::string& o : outputs) n->add_output(o);
    return n;
  }

  // An initializer holding `value` (concrete) under the name given.
  void add_initializer(const std::string& name, const Tensor& value) {
    ::onnx::TensorProto* t = graph_->add_initializer();
    internal::tensor_to_proto(value, t);
    t->set_name(name);
    initializer_values_[name] = value;
  }
  // The value of the initializer `name`, if it is one (a weight an emitter may fold).
  const Tensor* initializer_value(const std::string& name) const {
    auto it = initializer_values_.find(name);
    return it == initializer_values_.end() ? nullptr : &it->second;
  }

  ::onnx::GraphProto* graph() { return graph_; }

 private:
  static std::string unique(std::set<std::string>& used, const std::string& base) {
    std::string name = base;
    for (int i = 1; !used.insert(name).second; ++i) name = base + "_" + std::to_string(i);
    return name;
  }

  ::onnx::GraphProto* graph_;
  int64_t opset_;
  std::set<std::string> values_, nodes_;
  std::unordered_map<std::string, Tensor> initializer_values_;
};

// One Kiln node being exported: its inputs as ONNX value names and types, the names its outputs
// must get, and helpers adding ONNX nodes named after it.
class NodeEmitter {
 public:
  NodeEmitter(Builder& b, const NodeInfo& node, std::vector<std::string> inputs,
              std::vector<TensorType> input_types, std::vector<std::string> outputs)
      : b_(b),
        node_(node),
        inputs_(std::move(inputs)),
        input_types_(std::move(input_types)),
        outputs_(std::move(outputs)) {}

  const NodeInfo& node() const { return node_; }
  const Attrs& attrs() const { return node_.attrs; }
  const std::string& in(size_t i) const { return inputs_.at(i); }
  const TensorType& in_type(size_t i) const { return input_types_.at(i); }
  const TensorType& out_type(size_t i = 0) const { return node_.outputs.at(i); }
  const std::string& out(size_t i = 0) const { return outputs_.at(i); }
  Builder& builder() { return b_; }

  // Adds `op`(inputs) whose one output is `output`, or a new intermediate value when empty;
  // returns the node (its output is node->output(0)).
  ::onnx::NodeProto* add(const std::string& op, const std::vector<std::string>& inputs,
                         const std::string& output = "") {
    const std::string o = output.empty() ? b_.unique_value(node_.name + "/" + op) : output;
    return b_.add_node(op, node_.name + (output == out(0) ? "" : "/" + op), inputs, {o});
  }
  // The output name of add(...), for chaining.
  std::string value(const std::string& op, const std::vector<std::string>& inputs,
                    const std::string& output = "") {
    return add(op, inputs, output)->output(0);
  }
  // A 1-d int64 initializer (shapes, axes, starts).
  std::string ints(const Ints& v) {
    return initializer(Tensor::from_vector(v, {static_cast<int64_t>(v.size())}));
  }
  // A scalar of `dtype`.
  std::string scalar(double v, DType dtype) {
    return initializer(convert(Tensor::scalar(v), dtype));
  }
  std::string initializer(const Tensor& value) {
    const std::string name = b_.unique_value(node_.name + "/const");
    b_.add_initializer(name, value);
    return name;
  }

  [[noreturn]] void unsupported(const std::string& why) const { throw Unsupported{why}; }

 private:
  Builder& b_;
  const NodeInfo& node_;
  std::vector<std::string> inputs_;
  std::vector<TensorType> input_types_;
  std::vector<std::string> outputs_;
};

using Emit = std::function<void(NodeEmitter&)>;

// The emitter of each Kiln op that has an ONNX form, by op name.
const std::unordered_map<std::string, Emit>& emitters();

}  // namespace kiln::onnx::export_internal

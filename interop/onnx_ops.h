// How an ONNX node becomes Kiln ops: the context a converter reads its node through, and the
// one table of converters (interop/onnx_op_table.cc), an entry per op and opset range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "onnx/onnx_pb.h"  // Debian libonnx-dev: ONNX_API, then onnx-ml.pb.h (ONNX_ML)

namespace kiln::onnx::internal {

// Thrown by a converter for what Kiln cannot import (an attribute value, a dtype, an input that
// must be a constant); the importer collects these and reports every node at once.
struct Unsupported {
  std::string why;
};

// A node being converted: its inputs (concrete tensors for constants and values computed from
// them, symbolic ones for the rest) and its attributes.
class NodeContext {
 public:
  NodeContext(const ::onnx::NodeProto& node, int64_t opset, std::vector<Tensor> inputs)
      : node_(node), opset_(opset), inputs_(std::move(inputs)) {}

  const ::onnx::NodeProto& node() const { return node_; }
  int64_t opset() const { return opset_; }
  // Inputs, counting optional ones left out ("" in the node) or not given at the end.
  size_t num_inputs() const { return inputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i].defined(); }
  const Tensor& input(size_t i) const;
  const std::vector<Tensor>& inputs() const { return inputs_; }
  // Outputs the node names (the trailing optional ones it leaves out are not counted).
  int num_outputs() const { return node_.output_size(); }
  bool wants_output(int i) const { return i < node_.output_size() && !node_.output(i).empty(); }

  // Input i's values when they are known while importing (an initializer, a Constant, or a value
  // computed from those and static shapes); Unsupported naming `what` otherwise.
  const Tensor& constant_input(size_t i, const char* what) const;
  std::vector<int64_t> ints_input(size_t i, const char* what) const;

  bool has_attr(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  float attr_float(const std::string& name, float fallback) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name,
                                 std::vector<int64_t> fallback = {}) const;
  std::vector<float> attr_floats(const std::string& name) const;
  Tensor attr_tensor(const std::string& name) const;

  [[noreturn]] void unsupported(const std::string& why) const { throw Unsupported{why}; }
  // A malformed node (kInvalidArgument naming the node).
  [[noreturn]] void invalid(const std::string& why) const;
  std::string describe() const;  // "node 'conv1' (Conv)"

 private:
  const ::onnx::AttributeProto* find_attr(const std::string& name) const;

  const ::onnx::NodeProto& node_;
  int64_t opset_;
  std::vector<Tensor> inputs_;
};

using Converter = std::vector<Tensor> (*)(const NodeContext&);

struct OpEntry {
  const char* op;
  int since;            // the first opset version this entry converts
  const char* attrs;    // the attributes it understands, comma-separated; others are refused
  Converter convert;
};

// The entry for `op` of the default ONNX domain at `opset` (the newest whose `since` is not
// above it), or nullptr.
const OpEntry* find_op(const std::string& op, int64_t opset);
// Every op of the table, for documentation and the conformance report.
std::vector<std::string> table_ops();

}  // namespace kiln::onnx::internal

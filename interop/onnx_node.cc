// NodeContext: a converter's view of its ONNX node (inputs, constant inputs, attributes).
#include "interop/onnx_ops.h"
#include "interop/onnx_tensor.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {

std::string NodeContext::describe() const {
  return "node '" + node_.name() + "' (" + node_.op_type() + ")";
}

void NodeContext::invalid(const std::string& why) const {
  throw Error(ErrorCode::kInvalidArgument, why);
}

const Tensor& NodeContext::input(size_t i) const {
  if (!has_input(i)) invalid("input " + std::to_string(i) + " is missing");
  return inputs_[i];
}

const Tensor& NodeContext::constant_input(size_t i, const char* what) const {
  const Tensor& t = input(i);
  if (t.is_symbolic()) {
    unsupported(std::string("input ") + std::to_string(i) + " ('" + node_.input(i) + "', the " +
                what + ") must be known while importing (a constant, an initializer or a static "
                       "input: ImportOptions::static_inputs)");
  }
  return t;
}

std::vector<int64_t> NodeContext::ints_input(size_t i, const char* what) const {
  const Tensor& t = constant_input(i, what);
  if (!is_integer(t.dtype())) invalid(std::string("the ") + what + " must be integers");
  return t.to_vector<int64_t>();
}

const ::onnx::AttributeProto* NodeContext::find_attr(const std::string& name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool NodeContext::has_attr(const std::string& name) const { return find_attr(name) != nullptr; }

int64_t NodeContext::attr_int(const std::string& name, int64_t fallback) const {
  const auto* a = find_attr(name);
  return a ? a->i() : fallback;
}

float NodeContext::attr_float(const std::string& name, float fallback) const {
  const auto* a = find_attr(name);
  return a ? a->f() : fallback;
}

std::string NodeContext::attr_string(const std::string& name, const std::string& fallback) const {
  const auto* a = find_attr(name);
  return a ? a->s() : fallback;
}

std::vector<int64_t> NodeContext::attr_ints(const std::string& name,
                                            std::vector<int64_t> fallback) const {
  const auto* a = find_attr(name);
  if (!a) return fallback;
  return {a->ints().begin(), a->ints().end()};
}

std::vector<float> NodeContext::attr_floats(const std::string& name) const {
  const auto* a = find_attr(name);
  if (!a) return {};
  return {a->floats().begin(), a->floats().end()};
}

Tensor NodeContext::attr_tensor(const std::string& name) const {
  const auto* a = find_attr(name);
  if (!a || !a->has_t()) invalid("attribute " + name + " (a tensor) is missing");
  try {
    return tensor_from_proto(a->t(), ".", "attribute " + name);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kUnimplemented) unsupported(e.what());
    throw;
  }
}

}  // namespace kiln::onnx::internal

// The fused ops' vocabulary (compiler/fused_ops.h).
#include "compiler/fused_ops.h"

namespace kiln::compiler {

std::vector<int64_t> fusable_pool_window(const Attrs& attrs) {
  if (!attrs.has("window") || !attrs.has("strides")) return {};
  const std::vector<int64_t>& window = attrs.get_ints("window");
  if (window.size() != 4 || window[0] != 1 || window[3] != 1) return {};
  if (attrs.get_ints("strides") != window) return {};
  for (const char* pad : {"padding_low", "padding_high"}) {
    if (!attrs.has(pad)) continue;
    for (int64_t p : attrs.get_ints(pad))
      if (p != 0) return {};
  }
  return {window[1], window[2]};
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kLogistic:
      return "logistic";
  }
  return "none";
}

std::optional<Activation> activation_from_name(std::string_view name) {
  for (Activation a :
       {Activation::kNone, Activation::kRelu, Activation::kTanh, Activation::kLogistic})
    if (name == activation_name(a)) return a;
  return std::nullopt;
}

std::optional<Activation> unary_activation(std::string_view op) {
  if (op == "tanh") return Activation::kTanh;
  if (op == "logistic") return Activation::kLogistic;
  return std::nullopt;
}

std::optional<BiasKind> bias_kind(const Shape& bias, const Shape& out, bool allow_full,
                                  std::string* why) {
  if (bias.size() > out.size()) {
    *why = "its rank is above the output's";
    return std::nullopt;
  }
  int64_t n = num_elements(bias);
  if (n == 1 && is_fully_defined(bias)) return BiasKind::kScalar;
  if (allow_full && bias == out) return BiasKind::kFull;
  bool vector = !bias.empty() && !out.empty() && bias.back() == out.back() && bias.back() >= 0;
  for (size_t i = 0; vector && i + 1 < bias.size(); ++i) vector = bias[i] == 1;
  if (vector) return BiasKind::kVector;
  *why = allow_full ? "it is neither one element, a vector along the last dimension, nor the "
                      "output's shape"
                    : "it is neither one element nor a vector along the last (channel) dimension";
  return std::nullopt;
}

std::string bias_refusal(const TensorType& bias, const TensorType& out, bool allow_full) {
  if (bias.dtype != out.dtype) return "bias dtype differs from the output's";
  std::string why;
  if (!bias_kind(bias.shape, out.shape, allow_full, &why)) return "bias " + bias.str() + ": " + why;
  return "";
}

}  // namespace kiln::compiler

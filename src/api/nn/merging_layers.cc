// The merging layers: shape checks that name the layer and every input shape, then one op.
#include "kiln/nn/merging_layers.h"

#include <algorithm>

#include "kiln/nn/layer_registry.h"
#include "kiln/ops.h"

namespace kiln::nn {
namespace {

constexpr size_t kAnyNumber = static_cast<size_t>(-1);  // of inputs, for Merge's maximum

std::string shapes_str(const std::vector<Tensor>& inputs) {
  std::string out;
  for (const Tensor& x : inputs) out += (out.empty() ? "" : ", ") + shape_str(x.shape());
  return out;
}

bool dims_match(int64_t a, int64_t b) { return a == b || a == kUnknownDim || b == kUnknownDim; }

// What makes `inputs` fail to broadcast together ("" when they do), dimensions counted from
// the end as in NumPy.
std::string broadcast_conflict(const std::vector<Tensor>& inputs) {
  int64_t rank = 0;
  for (const Tensor& x : inputs) rank = std::max(rank, x.rank());
  for (int64_t back = 1; back <= rank; ++back) {
    int64_t seen = 1;
    for (const Tensor& x : inputs) {
      if (x.rank() < back) continue;
      int64_t d = x.dim(x.rank() - back);
      if (d == 1) continue;
      if (seen != 1 && !dims_match(seen, d)) {
        return "dimension " + std::to_string(rank - back) + " is " + std::to_string(seen) +
               " in one input and " + std::to_string(d) + " in another";
      }
      if (seen == 1 || seen == kUnknownDim) seen = d;
    }
  }
  return "";
}

}  // namespace

// ---- Concatenate --------------------------------------------------------------------------

Concatenate::Concatenate(int64_t axis) : Layer("concatenate"), axis_(axis) {}

Tensor Concatenate::call(const std::vector<Tensor>& inputs, CallContext&) {
  const int64_t rank = inputs.at(0).rank();
  const std::string where = "Concatenate '" + name() + "'";
  if (axis_ < -rank || axis_ >= rank) {
    throw Error(ErrorCode::kInvalidArgument,
                where + ": axis " + std::to_string(axis_) + " is out of range for inputs " +
                    shapes_str(inputs) + " (valid: " + std::to_string(-rank) + " to " +
                    std::to_string(rank - 1) + ")");
  }
  const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
  for (const Tensor& x : inputs) {
    bool same = x.rank() == rank;
    for (int64_t d = 0; same && d < rank; ++d)
      same = d == axis || dims_match(x.dim(d), inputs[0].dim(d));
    if (!same) {
      throw Error(ErrorCode::kInvalidArgument,
                  where +
                      ": inputs must have one rank and equal sizes except on the "
                      "concatenation axis " +
                      std::to_string(axis_) + ", got " + shapes_str(inputs));
    }
  }
  return concatenate(inputs, axis);
}

Attrs Concatenate::config() const { return {{"axis", axis_}}; }

// ---- elementwise merges -------------------------------------------------------------------

Merge::Merge(std::string name, size_t min_inputs, size_t max_inputs)
    : Layer(std::move(name)), min_inputs_(min_inputs), max_inputs_(max_inputs) {}

Tensor Merge::call(const std::vector<Tensor>& inputs, CallContext&) {
  const std::string where = type_name() + " '" + name() + "'";
  if (inputs.size() < min_inputs_ || inputs.size() > max_inputs_) {
    std::string wanted = min_inputs_ == max_inputs_ ? "exactly " + std::to_string(min_inputs_)
                                                    : "at least " + std::to_string(min_inputs_);
    throw Error(ErrorCode::kInvalidArgument, where + " takes " + wanted + " inputs, got " +
                                                 std::to_string(inputs.size()) + " (" +
                                                 shapes_str(inputs) + ")");
  }
  std::string conflict = broadcast_conflict(inputs);
  if (!conflict.empty()) {
    throw Error(ErrorCode::kInvalidArgument, where + ": inputs have incompatible shapes " +
                                                 shapes_str(inputs) + ": " + conflict);
  }
  return merge(inputs);
}

Multiply::Multiply() : Merge("multiply", 2, kAnyNumber) {}
Tensor Multiply::merge(const std::vector<Tensor>& inputs) const {
  Tensor out = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) out = out * inputs[i];
  return out;
}

Subtract::Subtract() : Merge("subtract", 2, 2) {}
Tensor Subtract::merge(const std::vector<Tensor>& inputs) const { return inputs[0] - inputs[1]; }

Average::Average() : Merge("average", 2, kAnyNumber) {}
Tensor Average::merge(const std::vector<Tensor>& inputs) const {
  Tensor total = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) total = total + inputs[i];
  return total / static_cast<double>(inputs.size());
}

Maximum::Maximum() : Merge("maximum", 2, kAnyNumber) {}
Tensor Maximum::merge(const std::vector<Tensor>& inputs) const {
  Tensor out = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) out = maximum(out, inputs[i]);
  return out;
}

Minimum::Minimum() : Merge("minimum", 2, kAnyNumber) {}
Tensor Minimum::merge(const std::vector<Tensor>& inputs) const {
  Tensor out = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) out = minimum(out, inputs[i]);
  return out;
}

// ---- registration (for saved models) --------------------------------------------------------

KILN_REGISTER_LAYER("Concatenate", [](const Attrs& c) {
  return std::make_shared<Concatenate>(c.get_int("axis"));
});
KILN_REGISTER_LAYER("Multiply", [](const Attrs&) { return std::make_shared<Multiply>(); });
KILN_REGISTER_LAYER("Subtract", [](const Attrs&) { return std::make_shared<Subtract>(); });
KILN_REGISTER_LAYER("Average", [](const Attrs&) { return std::make_shared<Average>(); });
KILN_REGISTER_LAYER("Maximum", [](const Attrs&) { return std::make_shared<Maximum>(); });
KILN_REGISTER_LAYER("Minimum", [](const Attrs&) { return std::make_shared<Minimum>(); });

}  // namespace kiln::nn

// kiln::Variable: mutable state (weights, optimizer slots, moving statistics) owned outside
// any graph. A training step graph takes variables' values as inputs and returns their new
// values; the caller assigns them back. Copies of a Variable share the same state.
// Compiled steps (kiln::function, Model::fit) update a variable's buffer in place when nothing
// else holds it; a Tensor copied from value() is a snapshot: it keeps the value it had (the
// step then writes the new value into a fresh buffer instead: copy-on-write). While such a
// step runs, the variable's tensor is lent to it: reading the variable from another thread
// meanwhile is a race, as assigning it concurrently always was.
#pragma once

#include <memory>
#include <string>

#include "kiln/tensor.h"

namespace kiln {

namespace detail {
struct VariableAccess;
}  // namespace detail

class Variable {
 public:
  Variable() = default;
  Variable(Tensor initial_value, std::string name, bool trainable = true);

  bool defined() const { return state_ != nullptr; }
  const std::string& name() const;
  bool trainable() const;
  // The current value. A reference: it follows later assignments; copy the Tensor to keep a
  // snapshot.
  const Tensor& value() const;
  DType dtype() const { return value().dtype(); }
  const Shape& shape() const { return value().shape(); }
  // Replaces the value; the new value must be concrete with the same dtype and shape.
  void assign(Tensor value);

  // Identity: two handles to the same variable compare equal.
  bool operator==(const Variable& other) const { return state_ == other.state_; }
  const void* id() const { return state_.get(); }

 private:
  friend struct detail::VariableAccess;
  struct State;
  const State& checked() const;
  std::shared_ptr<State> state_;
};

}  // namespace kiln

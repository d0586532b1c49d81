// kiln::Variable: mutable state (weights, optimizer slots, moving statistics) owned outside
// any graph. A training step graph takes variables' values as inputs and returns their new
// values; the caller assigns them back. Copies of a Variable share the same state.
// Compiled steps (kiln::function, Model::fit) update a variable's buffer in place when nothing
// else holds it; a Tensor copied from value() is a snapshot: it keeps the value it had (the
// step then writes the new value into a fresh buffer instead: copy-on-write). While such a
// step runs, the variable's tensor is lent to it: reading the variable from another thread
// meanwhile is a race, as assigning it concurrently always was.
// A model trained on a GPU keeps its variables there (Model::fit on a device): device() says
// where a variable's value lives, and value() then returns a host copy of it, made on the first
// read after each change (as TensorFlow copies a GPU variable to read it on the host).
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
  // The current value, on the host. A reference: it follows later assignments; copy the Tensor
  // to keep a snapshot. For a variable on a GPU, a copy made when the value changed since the
  // last read (kiln::Error as Tensor::to(Device::cpu()) throws, when the copy fails).
  const Tensor& value() const;
  DType dtype() const;
  const Shape& shape() const;
  // Where the value lives: the host, or the GPU a model trained on keeps it on.
  Device device() const;
  // Replaces the value; the new value must be concrete with the same dtype and shape (a device
  // tensor keeps the variable on that device).
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

// Variable state and checked assignment.
#include "kiln/variable.h"

#include "src/core/variable_capture.h"

namespace kiln {

namespace detail {
VariableCapture*& variable_capture() {
  thread_local VariableCapture* capture = nullptr;
  return capture;
}
}  // namespace detail

struct Variable::State {
  std::string name;
  bool trainable;
  Tensor value;
};

const Variable::State& Variable::checked() const {
  if (!state_) throw Error(ErrorCode::kFailedPrecondition, "use of an undefined Variable");
  return *state_;
}

Variable::Variable(Tensor initial_value, std::string name, bool trainable) {
  if (!initial_value.defined() || initial_value.is_symbolic()) {
    throw Error(ErrorCode::kInvalidArgument,
                "Variable '" + name + "': the initial value must be a concrete tensor");
  }
  state_ = std::make_shared<State>(State{std::move(name), trainable, std::move(initial_value)});
}

void detail::VariableAccess::rename(const Variable& v, std::string name) {
  const_cast<Variable::State&>(v.checked()).name = std::move(name);
}

Tensor& detail::VariableAccess::held(const Variable& v) {
  return const_cast<Variable::State&>(v.checked()).value;
}

const std::string& Variable::name() const { return checked().name; }
bool Variable::trainable() const { return checked().trainable; }
const Tensor& Variable::value() const {
  const State& s = checked();
  if (detail::VariableCapture* capture = detail::variable_capture()) {
    detail::VariableCaptureScope concrete(nullptr);
    return capture->read(*this);
  }
  return s.value;
}

void Variable::assign(Tensor value) {
  const State& s = checked();
  detail::VariableCapture* capture = detail::variable_capture();
  bool traced = capture && value.defined() && value.is_symbolic();
  if (!traced && (!value.defined() || value.is_symbolic())) {
    throw Error(ErrorCode::kInvalidArgument,
                "Variable '" + s.name + "': assign needs a concrete tensor");
  }
  if (value.dtype() != s.value.dtype() || value.shape() != s.value.shape()) {
    throw Error(ErrorCode::kInvalidArgument,
                "Variable '" + s.name + "': cannot assign " + dtype_name(value.dtype()) +
                    shape_str(value.shape()) + " to a variable of " + dtype_name(s.value.dtype()) +
                    shape_str(s.value.shape()));
  }
  if (traced) {
    detail::VariableCaptureScope concrete(nullptr);
    capture->assign(*this, value);
    return;
  }
  state_->value = std::move(value);
}

}  // namespace kiln

// Variable state and checked assignment.
#include "kiln/variable.h"

#include <mutex>

#include "src/core/variable_capture.h"

namespace kiln {

namespace {

bool on_a_device(const Tensor& t) {
  return t.defined() && !t.is_symbolic() && t.device().type != DeviceType::kCpu;
}

}  // namespace

namespace detail {
VariableCapture*& variable_capture() {
  thread_local VariableCapture* capture = nullptr;
  return capture;
}
}  // namespace detail

struct Variable::State {
  std::string name;
  bool trainable;
  Tensor value;  // on the host or a device
  // A device value's host copy (value()), fresh until the value may have changed: assign and
  // every VariableAccess::held (a step's write access) mark it stale, and the next read makes a
  // new one. Never refilled in place: a Tensor copied from value() keeps the bytes it had, and
  // a reference kept from it reads the last copy made (until a host value is assigned, which
  // drops the copy).
  mutable std::mutex host_mu;
  mutable Tensor host_copy;
  mutable bool host_stale = true;
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
  state_ = std::make_shared<State>();
  state_->name = std::move(name);
  state_->trainable = trainable;
  state_->value = std::move(initial_value);
}

void detail::VariableAccess::rename(const Variable& v, std::string name) {
  const_cast<Variable::State&>(v.checked()).name = std::move(name);
}

Tensor& detail::VariableAccess::held(const Variable& v) {
  auto& s = const_cast<Variable::State&>(v.checked());
  std::lock_guard lock(s.host_mu);
  s.host_stale = true;
  return s.value;
}

const Tensor& detail::VariableAccess::stored(const Variable& v) { return v.checked().value; }

const std::string& Variable::name() const { return checked().name; }
bool Variable::trainable() const { return checked().trainable; }
const Tensor& Variable::value() const {
  const State& s = checked();
  if (detail::VariableCapture* capture = detail::variable_capture()) {
    detail::VariableCaptureScope concrete(nullptr);
    return capture->read(*this);
  }
  if (!on_a_device(s.value)) return s.value;
  std::lock_guard lock(s.host_mu);
  if (s.host_stale || !s.host_copy.defined()) {
    s.host_copy = s.value.to(Device::cpu());
    s.host_stale = false;
  }
  return s.host_copy;
}

DType Variable::dtype() const {
  if (detail::variable_capture() != nullptr) return value().dtype();
  return checked().value.dtype();
}

const Shape& Variable::shape() const {
  if (detail::variable_capture() != nullptr) return value().shape();
  return checked().value.shape();
}

Device Variable::device() const {
  const Tensor& v = checked().value;
  return on_a_device(v) ? v.device() : Device::cpu();
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
  {
    std::lock_guard lock(state_->host_mu);
    state_->host_stale = true;
    if (!on_a_device(value)) state_->host_copy = Tensor();  // back on the host: not needed
  }
  state_->value = std::move(value);
}

}  // namespace kiln

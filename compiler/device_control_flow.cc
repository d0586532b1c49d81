// Control flow on a device (compiler/device_control_flow.h).
#include "compiler/device_control_flow.h"

#include "compiler/control_flow.h"
#include "compiler/executable.h"
#include "src/core/device_memory.h"

namespace kiln::compiler {
namespace {

using Device_ = std::shared_ptr<const DeviceBackend>;
// A device predicate's value (one scalar downloaded).
bool predicate(const Tensor& t) {
  return (t.device() == Device::cpu() ? t : t.to(Device::cpu())).item<bool>();
}

class DeviceCond final : public DeviceControlFlow {
 public:
  DeviceCond(CompiledSub then_branch, CompiledSub else_branch)
      : then_(std::move(then_branch)), else_(std::move(else_branch)) {}
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override {
    std::vector<Tensor> args(inputs.begin() + 1, inputs.end());
    return (predicate(inputs[0]) ? then_ : else_)(std::move(args));
  }

 private:
  CompiledSub then_, else_;
};

class DeviceWhile final : public DeviceControlFlow {
 public:
  DeviceWhile(CompiledSub cond, CompiledSub body, int64_t num_vars, int64_t max_iterations)
      : cond_(std::move(cond)), body_(std::move(body)), num_vars_(num_vars),
        max_iterations_(max_iterations) {}
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override {
    std::vector<Tensor> vars(inputs.begin(), inputs.begin() + num_vars_);
    const std::vector<Tensor> captured(inputs.begin() + num_vars_, inputs.end());
    for (int64_t step = 0; max_iterations_ < 0 || step < max_iterations_; ++step) {
      std::vector<Tensor> args = vars;
      args.insert(args.end(), captured.begin(), captured.end());
      if (!predicate(cond_(std::move(args)).at(0))) break;
      args = std::move(vars);
      args.insert(args.end(), captured.begin(), captured.end());
      vars = body_(std::move(args));
    }
    return vars;
  }

 private:
  CompiledSub cond_, body_;
  int64_t num_vars_, max_iterations_;
};

class DeviceScan final : public DeviceControlFlow {
 public:
  DeviceScan(Device_ device, CompiledSub body, const detail::Node& node,
             std::vector<TensorType> outputs)
      : device_(std::move(device)), body_(std::move(body)), nc_(node.attrs.get_int("num_carry")),
        nx_(node.attrs.get_int("num_xs")), length_(node.attrs.get_int("length")),
        reverse_(node.attrs.get_bool("reverse", false)), outputs_(std::move(outputs)) {}

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override {
    // The ys, each filled row by row within the device.
    std::vector<Tensor> ys;
    for (size_t k = static_cast<size_t>(nc_); k < outputs_.size(); ++k) {
      const TensorType& t = outputs_[k];
      const int64_t bytes = bytes_of(t);
      void* p = bytes > 0 ? device_->allocate(bytes, device_->name() + ": scan output " +
                                                         std::to_string(k - nc_))
                          : nullptr;
      ys.push_back(p ? detail::device_tensor(device_, p, t.dtype, t.shape)
                     : detail::device_view(device_, nullptr, t.dtype, t.shape));
    }
    std::vector<Tensor> carry(inputs.begin(), inputs.begin() + nc_);
    const std::vector<Tensor> captured(inputs.begin() + nc_ + nx_, inputs.end());
    for (int64_t s = 0; s < length_; ++s) {
      const int64_t t = reverse_ ? length_ - 1 - s : s;
      std::vector<Tensor> args = std::move(carry);
      for (int64_t j = 0; j < nx_; ++j) args.push_back(row(inputs[nc_ + j], t));
      args.insert(args.end(), captured.begin(), captured.end());
      std::vector<Tensor> r = body_(std::move(args));
      carry.assign(std::make_move_iterator(r.begin()), std::make_move_iterator(r.begin() + nc_));
      for (size_t k = 0; k < ys.size(); ++k) {
        const int64_t row_bytes = bytes_of(outputs_[nc_ + k]) / length_;
        if (row_bytes > 0)
          device_->copy(static_cast<char*>(detail::device_pointer(ys[k])) + row_bytes * t,
                        detail::device_pointer(r[nc_ + k]), row_bytes);
      }
    }
    std::vector<Tensor> out = std::move(carry);
    out.insert(out.end(), ys.begin(), ys.end());
    return out;
  }

 private:
  // Row t of device tensor x (its first dimension), as a view.
  Tensor row(const Tensor& x, int64_t t) const {
    Shape shape(x.shape().begin() + 1, x.shape().end());
    const int64_t bytes = bytes_of({x.dtype(), shape});
    char* base = static_cast<char*>(detail::device_pointer(x));
    return detail::device_view(device_, base ? base + bytes * t : nullptr, x.dtype(),
                               std::move(shape));
  }

  Device_ device_;
  CompiledSub body_;
  int64_t nc_, nx_, length_;
  bool reverse_;
  std::vector<TensorType> outputs_;
};

}  // namespace

std::shared_ptr<const DeviceControlFlow> device_control_flow(
    const Device_& device, const detail::Node& node, const std::vector<TensorType>& inputs,
    const std::vector<TensorType>& outputs, std::string* description) {
  const std::string on = " on " + device->name();
  if (node.op == "cond") {
    std::vector<TensorType> params(inputs.begin() + 1, inputs.end());
    CompiledSub a = compile_sub(device, sub_of(node, "then_branch"), params, 0);
    CompiledSub b = compile_sub(device, sub_of(node, "else_branch"), params, 0);
    *description = "cond(then: " + a.thunks() + ", else: " + b.thunks() + ")" + on;
    return std::make_shared<DeviceCond>(std::move(a), std::move(b));
  }
  if (node.op == "while") {
    const int64_t num_vars = node.attrs.get_int("num_vars");
    CompiledSub c = compile_sub(device, sub_of(node, "cond"), inputs, 0, /*results_on_host=*/true);
    CompiledSub b =
        compile_sub(device, sub_of(node, "body"), inputs, static_cast<size_t>(num_vars));
    *description = "while(cond: " + c.thunks() + ", body: " + b.thunks() + ")" + on;
    return std::make_shared<DeviceWhile>(std::move(c), std::move(b), num_vars,
                                         node.attrs.get_int("max_iterations", -1));
  }
  if (node.op == "scan") {
    const int64_t nc = node.attrs.get_int("num_carry"), nx = node.attrs.get_int("num_xs");
    std::vector<TensorType> params = inputs;
    for (int64_t j = nc; j < nc + nx; ++j) params[j].shape.erase(params[j].shape.begin());
    CompiledSub b = compile_sub(device, sub_of(node, "body"), params, static_cast<size_t>(nc));
    *description = "scan(length " + std::to_string(node.attrs.get_int("length")) +
                   ", body: " + b.thunks() + ")" + on;
    return std::make_shared<DeviceScan>(device, std::move(b), node, outputs);
  }
  throw Error(ErrorCode::kInternal, "device_control_flow: '" + node.op + "' is not control flow");
}

}  // namespace kiln::compiler

// Eager ops on device tensors (runtime::set_device_runner): an op whose inputs include a GPU's
// tensors runs on that GPU as a one-op device program whose outputs stay there, compiled once
// per (backend, op, attributes, input types, which inputs are on the device) and kept, the
// least recently used dropped beyond kKept programs, as JAX runs an op on device arrays
// through a cached jit of it. Host inputs are copied up by the program; an op the device has
// no kernel for runs on the host inside it, its values copied across.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "compiler/device_backend.h"
#include "runtime/execute.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {
namespace {

constexpr size_t kKept = 256;

struct OneOp {
  Graph graph;
  Attrs attrs;  // the op's, compared on a hit: the key prints floats to 6 digits
  std::vector<Tensor> placeholders, outputs;
  std::shared_ptr<const DeviceBackend> backend;  // kept alive with the program
  std::shared_ptr<const Executable> program;
  uint64_t last_used = 0;
};

class Programs {
 public:
  std::shared_ptr<OneOp> find(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = kept_.find(key);
    if (it == kept_.end()) return nullptr;
    it->second->last_used = ++clock_;
    return it->second;
  }
  void keep(const std::string& key, std::shared_ptr<OneOp> op) {
    std::lock_guard lock(mu_);
    if (kept_.size() >= kKept) {
      auto oldest = kept_.begin();
      for (auto it = kept_.begin(); it != kept_.end(); ++it)
        if (it->second->last_used < oldest->second->last_used) oldest = it;
      kept_.erase(oldest);
    }
    op->last_used = ++clock_;
    kept_[key] = std::move(op);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<OneOp>> kept_;
  uint64_t clock_ = 0;
};

Programs& programs() {
  static Programs* p = new Programs;  // never destroyed: device tensors may outlive statics
  return *p;
}

// Attributes holding a tensor or a sub-graph have no key that identifies them: such an op is
// compiled for its call alone.
bool keyable(const Attrs& attrs) {
  for (const auto& [name, value] : attrs.values())
    if (std::holds_alternative<Tensor>(value) || std::holds_alternative<std::shared_ptr<const SubGraph>>(value))
      return false;
  return true;
}

std::vector<Tensor> run_on_device(const OpDef& def, const std::vector<Tensor>& inputs,
                                  const Attrs& attrs, const Device& device) {
  // The backend whose memory the device inputs are in (all on `device`: call_op checked).
  std::shared_ptr<const DeviceBackend> backend;
  for (const Tensor& t : inputs) {
    if (t.device().type == DeviceType::kCpu) continue;
    backend = std::dynamic_pointer_cast<const DeviceBackend>(t.impl()->storage->memory);
    if (backend) break;
  }
  if (!backend) {
    throw Error(ErrorCode::kInternal,
                def.name + ": an input on " + device.str() + " is in memory no backend owns");
  }
  std::string key;
  if (keyable(attrs)) {
    key = std::to_string(reinterpret_cast<uintptr_t>(backend.get())) + "|" + def.name + "|" +
          attrs.str();
    for (const Tensor& t : inputs) {
      key += "|" + TensorType{t.dtype(), t.shape()}.str() +
             (t.device().type == DeviceType::kCpu ? "@host" : "@device");
    }
  }
  std::shared_ptr<OneOp> op = key.empty() ? nullptr : programs().find(key);
  if (op && !(op->attrs == attrs)) {
    op = nullptr;  // attributes the key does not tell apart: this call's own program
    key.clear();
  }
  if (!op) {
    op = std::make_shared<OneOp>(
        OneOp{Graph("eager_" + def.name), attrs, {}, {}, backend, nullptr, 0});
    for (size_t i = 0; i < inputs.size(); ++i) {
      op->placeholders.push_back(op->graph.placeholder(inputs[i].dtype(), inputs[i].shape(),
                                                       "input_" + std::to_string(i)));
    }
    // Recorded in the program's graph (its inputs are that graph's): the op's own shape checks
    // and messages.
    op->outputs = call_op(def.name, op->placeholders, attrs);
    FeedList feeds;
    for (size_t i = 0; i < inputs.size(); ++i) feeds.push_back({op->placeholders[i], inputs[i]});
    op->program = std::make_shared<const Executable>(compile_for_device(
        backend, op->graph, op->outputs, feeds, {}, /*outputs_on_device=*/true));
    if (!key.empty()) programs().keep(key, op);
  }
  FeedList feeds;
  feeds.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) feeds.push_back({op->placeholders[i], inputs[i]});
  return op->program->run(feeds);
}

const bool kInstalled = [] {
  runtime::set_device_runner(&run_on_device);
  return true;
}();

}  // namespace
}  // namespace kiln::compiler

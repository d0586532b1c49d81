// kiln::function: per-signature tracing (arguments become placeholders, variables read become
// extra inputs, variables assigned become extra outputs) and execution of the traced graph,
// compiled or interpreted; and the process-wide default execution mode.
#include "kiln/function.h"

#include <list>
#include <map>
#include <mutex>

#include "compiler/executable.h"
#include "src/core/device_memory.h"
#include "src/core/tensor_impl.h"
#include "src/core/variable_capture.h"

namespace kiln {

namespace {

std::string signature_of(const std::vector<Tensor>& args) {
  std::string s;
  for (const Tensor& t : args) s += TensorType{t.dtype(), t.shape()}.str() + ";";
  return s;
}

}  // namespace

namespace detail {

std::vector<Tensor> function_outputs(Tensor t) { return {std::move(t)}; }
std::vector<Tensor> function_outputs(std::vector<Tensor> t) { return t; }

void check_function_arity(const std::string& name, size_t expected, size_t got) {
  if (expected != got) {
    throw Error(ErrorCode::kInvalidArgument,
                "function '" + name + "' takes " + std::to_string(expected) + " tensor" +
                    (expected == 1 ? "" : "s") + ", called with " + std::to_string(got));
  }
}

}  // namespace detail

namespace {

// One traced signature: the graph, what feeds it and what its fetches mean.
struct Traced {
  Graph graph;
  std::vector<Tensor> arguments;                     // placeholders
  std::vector<Tensor> outputs;                       // the function's results
  std::vector<std::pair<Variable, Tensor>> reads;    // variable -> its placeholder
  std::vector<std::pair<Variable, Tensor>> updates;  // variable -> its new value
  std::vector<Tensor> fetches;                       // outputs, then the updates' values
  // Variables both read and assigned: the new value is written into the fed buffer.
  std::vector<compiler::Donation> donations;
  std::vector<int> donated_update;                         // per read: its update's index, or -1
  std::shared_ptr<const compiler::Executable> executable;  // compiled on first compiled run
  std::mutex compile_mu;
};

// Records variable reads and assignments into the graph being traced.
class Capture : public detail::VariableCapture {
 public:
  explicit Capture(Traced& t) : t_(t) {}

  const Tensor& read(const Variable& v) override {
    for (auto& [var, value] : t_.updates)  // read after an assignment in the same trace
      if (var == v) return value;
    for (auto& [var, placeholder] : t_.reads)
      if (var == v) return placeholder;
    auto scopes = std::exchange(t_.graph.impl()->scopes, {});
    Tensor p = t_.graph.placeholder(v.dtype(), v.shape(), v.name());
    t_.graph.impl()->scopes = std::move(scopes);
    t_.reads.emplace_back(v, p);
    return t_.reads.back().second;
  }

  void assign(const Variable& v, const Tensor& value) override {
    if (value.impl()->graph != t_.graph.impl()) {
      throw Error(ErrorCode::kInvalidArgument, "function '" + t_.graph.name() + "': variable '" +
                                                   v.name() +
                                                   "' is assigned a value of another graph");
    }
    for (auto& [var, current] : t_.updates) {
      if (var == v) {
        current = value;
        return;
      }
    }
    t_.updates.emplace_back(v, value);
  }

 private:
  Traced& t_;
};

}  // namespace

struct Function::Impl {
  Body body;
  FunctionOptions options;
  mutable std::mutex mu;
  std::list<std::pair<std::string, std::shared_ptr<Traced>>> cache;  // most recent first
  Stats stats;

  std::shared_ptr<Traced> trace(const std::vector<Tensor>& args) {
    auto t = std::make_shared<Traced>();
    t->graph = Graph(options.name);
    for (size_t i = 0; i < args.size(); ++i) {
      t->arguments.push_back(
          t->graph.placeholder(args[i].dtype(), args[i].shape(), "arg" + std::to_string(i)));
    }
    std::vector<Tensor> results;
    {
      auto guard = t->graph.as_default();
      Capture capture(*t);
      detail::VariableCaptureScope scope(&capture);
      results = body(t->arguments);
    }
    for (size_t i = 0; i < results.size(); ++i) {
      Tensor& r = results[i];
      if (!r.defined()) {
        throw Error(ErrorCode::kInvalidArgument, "function '" + options.name + "': result " +
                                                     std::to_string(i) + " is undefined");
      }
      if (!r.is_symbolic()) {
        r = t->graph.constant(r, "result" + std::to_string(i));
      } else if (r.impl()->graph != t->graph.impl()) {
        throw Error(ErrorCode::kInvalidArgument,
                    "function '" + options.name + "': result " + std::to_string(i) +
                        " is a value of another graph ('" + r.graph().name() + "')");
      }
    }
    t->outputs = results;
    t->fetches = results;
    for (const auto& [var, value] : t->updates) t->fetches.push_back(value);
    t->donated_update.assign(t->reads.size(), -1);
    for (size_t k = 0; k < t->updates.size(); ++k) {
      for (size_t j = 0; j < t->reads.size(); ++j) {
        if (t->reads[j].first != t->updates[k].first) continue;
        t->donated_update[j] = static_cast<int>(k);
        t->donations.push_back({t->reads[j].second, static_cast<int>(results.size() + k)});
      }
    }
    return t;
  }

  // The trace for the arguments' signature; `call` says whether this is a call (counted).
  std::shared_ptr<Traced> lookup(const std::vector<Tensor>& args, bool call) {
    std::string key = signature_of(args);
    std::lock_guard lock(mu);
    stats.calls += call;
    for (auto it = cache.begin(); it != cache.end(); ++it) {
      if (it->first == key) {
        stats.cache_hits += call;
        cache.splice(cache.begin(), cache, it);
        return cache.front().second;
      }
    }
    std::shared_ptr<Traced> t = trace(args);
    ++stats.traces;
    cache.emplace_front(key, t);
    while (cache.size() > std::max<size_t>(options.cache_capacity, 1)) {
      cache.pop_back();
      ++stats.evictions;
    }
    return t;
  }
};

Function::Function(Body body, FunctionOptions options) : impl_(std::make_shared<Impl>()) {
  if (!body) throw Error(ErrorCode::kInvalidArgument, "function: the body is empty");
  compiler::check_device(options.device);
  impl_->body = std::move(body);
  impl_->options = std::move(options);
}

std::vector<Tensor> Function::operator()(const std::vector<Tensor>& args) const {
  bool inline_call = detail::default_graph() != nullptr;
  for (const Tensor& a : args) {
    if (!a.defined()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "function '" + impl_->options.name + "': an argument is undefined");
    }
    inline_call = inline_call || a.is_symbolic();
  }
  if (inline_call) return impl_->body(args);

  std::shared_ptr<Traced> t = impl_->lookup(args, /*call=*/true);
  ExecutionMode mode = impl_->options.mode.value_or(default_execution_mode());
  const bool donate = mode == ExecutionMode::kCompiled;
  FeedList feeds;
  feeds.reserve(args.size() + t->reads.size());
  for (size_t i = 0; i < args.size(); ++i) feeds.emplace_back(t->arguments[i], args[i]);
  // Compiled, a variable that is read and assigned lends its tensor to the run (moved out, so
  // that the run may hold the only handle and update its buffer in place).
  const size_t first_read = feeds.size();
  std::vector<bool> updated(t->updates.size(), false);
  // A variable kept on another device than the program's is read through a host copy, made
  // before any variable is lent (a failed copy leaves them all as they were).
  std::vector<Tensor> copies(t->reads.size());
  for (size_t j = 0; donate && j < t->reads.size(); ++j) {
    const Tensor& stored = detail::VariableAccess::stored(t->reads[j].first);
    if (detail::needs_host_copy(stored, impl_->options.device))
      copies[j] = stored.to(Device::cpu());
  }
  for (size_t j = 0; j < t->reads.size(); ++j) {
    const auto& [var, placeholder] = t->reads[j];
    if (copies[j].defined()) {
      feeds.emplace_back(placeholder, std::move(copies[j]));
    } else if (donate && t->donated_update[j] >= 0) {
      feeds.emplace_back(placeholder, std::move(detail::VariableAccess::held(var)));
    } else if (donate) {
      feeds.emplace_back(placeholder, detail::VariableAccess::stored(var));
    } else {
      feeds.emplace_back(placeholder, var.value());
    }
  }
  auto give_back = [&] {  // the lent tensors, after a failure
    for (size_t j = 0; j < t->reads.size(); ++j) {
      Tensor& held = detail::VariableAccess::held(t->reads[j].first);
      if (!held.defined()) held = std::move(feeds[first_read + j].second);
    }
  };

  std::vector<Tensor> values;
  if (mode == ExecutionMode::kCompiled) {
    try {
      std::shared_ptr<const compiler::Executable> exe;
      {
        std::lock_guard lock(t->compile_mu);
        if (!t->executable) {
          // On a GPU the variables' new values stay there (read in place by the next call);
          // the function's results come back to the host.
          compiler::CompileOptions options{.device = impl_->options.device};
          if (options.device.type != DeviceType::kCpu) {
            options.device_outputs.assign(t->outputs.size(), false);   // the results
            options.device_outputs.resize(t->fetches.size(), true);    // the variables' values
          }
          t->executable = std::make_shared<const compiler::Executable>(
              compiler::compile(t->graph, t->fetches, feeds, t->donations, options));
        }
        exe = t->executable;
      }
      values = exe->run_donating(std::move(feeds));
    } catch (...) {
      give_back();
      throw;
    }
    for (size_t j = 0; j < t->reads.size(); ++j) {
      int k = t->donated_update[j];
      if (k < 0) continue;
      // The same Tensor when its buffer was updated in place, else a fresh one.
      detail::VariableAccess::held(t->reads[j].first) = values[t->outputs.size() + k];
      updated[k] = true;
    }
  } else {
    values = t->graph.run(feeds, t->fetches);
  }
  for (size_t k = 0; k < t->updates.size(); ++k)
    if (!updated[k]) t->updates[k].first.assign(values[t->outputs.size() + k]);
  values.resize(t->outputs.size());
  return values;
}

Function::Trace Function::trace(const std::vector<Tensor>& args) const {
  for (const Tensor& a : args) {
    if (!a.defined() || a.is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "function '" + impl_->options.name + "': trace needs concrete arguments");
    }
  }
  std::shared_ptr<Traced> t = impl_->lookup(args, /*call=*/false);
  return Trace{t->graph, t->arguments, t->outputs};
}

Function::Stats Function::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

const FunctionOptions& Function::options() const { return impl_->options; }

}  // namespace kiln

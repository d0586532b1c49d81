// kiln::function: traces a C++ function of tensors into a graph once per input signature
// (dtypes and shapes) and runs that graph compiled by Kiln's compiler, like tf.function and
// jax.jit. Variables the function reads are inputs of the graph (their current values are fed
// at every call) and variables it assigns are updated after each call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/device.h"
#include "kiln/execution_mode.h"
#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln {

struct FunctionOptions {
  std::string name = "function";       // the traced graphs' name
  std::optional<ExecutionMode> mode;   // default_execution_mode() at each call when unset
  size_t cache_capacity = 8;           // traced signatures kept, least recently used dropped
  // Where compiled calls run: the host, or a GPU (Device::cuda(0)): the traced graph's fused
  // loops and dots run there, its other ops on the host; results are host tensors (arguments
  // may be host tensors or that GPU's), and the variables it updates keep their new values on
  // the GPU (Variable::device()), read there in place by the next call. Checked when the
  // Function is made (kUnavailable without a GPU). Interpreted calls run on the host.
  Device device = Device::cpu();
};

// A traced function over a vector of tensors. Copies share the trace cache.
class Function {
 public:
  using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  explicit Function(Body body, FunctionOptions options = {});

  // Runs the function on concrete tensors: traced and compiled on the first call with this
  // signature, then from the cache. With a symbolic argument (or while another graph is being
  // recorded) the body is called directly, so functions compose inside traces.
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const;

  // The graph traced for these arguments' signature (tracing it if needed), with its
  // placeholders in argument order, for inspection.
  struct Trace {
    Graph graph;
    std::vector<Tensor> arguments;  // placeholders, one per argument
    std::vector<Tensor> outputs;    // values of `graph`, one per returned tensor
  };
  Trace trace(const std::vector<Tensor>& args) const;

  struct Stats {
    int64_t calls = 0;
    int64_t traces = 0;      // cache misses: a new signature was traced and compiled
    int64_t cache_hits = 0;  // calls that reused a traced signature
    int64_t evictions = 0;
  };
  Stats stats() const;
  const FunctionOptions& options() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

namespace detail {

template <typename T>
struct CallableTraits : CallableTraits<decltype(&T::operator())> {};
template <typename R, typename... A>
struct CallableTraits<R (*)(A...)> {
  using Result = R;
  static constexpr size_t kArity = sizeof...(A);
};
template <typename R, typename... A>
struct CallableTraits<R(A...)> : CallableTraits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct CallableTraits<R (C::*)(A...) const> : CallableTraits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct CallableTraits<R (C::*)(A...)> : CallableTraits<R (*)(A...)> {};

std::vector<Tensor> function_outputs(Tensor t);
std::vector<Tensor> function_outputs(std::vector<Tensor> t);
void check_function_arity(const std::string& name, size_t expected, size_t got);

}  // namespace detail

// The typed form kiln::function returns: called with tensors, returns what the body returns
// (a Tensor or a std::vector<Tensor>).
template <typename Result>
class TracedFunction {
 public:
  explicit TracedFunction(Function fn) : fn_(std::move(fn)) {}

  template <typename... Args>
  Result operator()(const Args&... args) const {
    std::vector<Tensor> out = fn_(std::vector<Tensor>{Tensor(args)...});
    if constexpr (std::is_same_v<Result, Tensor>) {
      return out.at(0);
    } else {
      return out;
    }
  }
  std::vector<Tensor> call(const std::vector<Tensor>& args) const { return fn_(args); }

  const Function& function() const { return fn_; }
  Function::Stats stats() const { return fn_.stats(); }
  Function::Trace trace(const std::vector<Tensor>& args) const { return fn_.trace(args); }

 private:
  Function fn_;
};

// Wraps `f`, a callable taking Tensors (by value or const reference) or one
// `const std::vector<Tensor>&`, and returning a Tensor or a std::vector<Tensor>:
//   auto step = kiln::function([](const Tensor& x, const Tensor& w) { return relu(dot(x, w)); });
//   Tensor y = step(x, w);  // traced and compiled for x's and w's dtypes and shapes
template <typename F>
auto function(F f, FunctionOptions options = {}) {
  using Traits = detail::CallableTraits<std::decay_t<F>>;
  using Result = std::decay_t<typename Traits::Result>;
  static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, std::vector<Tensor>>,
                "kiln::function: the function must return a Tensor or a std::vector<Tensor>");
  Function::Body body;
  if constexpr (std::is_invocable_v<F&, const std::vector<Tensor>&>) {
    body = [f = std::move(f)](const std::vector<Tensor>& args) mutable {
      return detail::function_outputs(f(args));
    };
  } else {
    constexpr size_t kArity = Traits::kArity;
    body = [f = std::move(f), name = options.name](const std::vector<Tensor>& args) mutable {
      detail::check_function_arity(name, kArity, args.size());
      return [&]<size_t... I>(std::index_sequence<I...>) {
        return detail::function_outputs(f(args[I]...));
      }(std::make_index_sequence<kArity>{});
    };
  }
  return TracedFunction<Result>(Function(std::move(body), std::move(options)));
}

}  // namespace kiln

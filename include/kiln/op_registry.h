// The op and kernel registries, and the macros that fill them. Built-in ops register here
// exactly as a user's custom op does: one entry per op holds its inputs, outputs, shape and
// dtype inference, gradient rule and kernels.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/elemental.h"
#include "kiln/graph.h"
#include "kiln/tensor.h"

namespace kiln {

// What a shape function sees: input types (dimensions may be kUnknownDim while recording;
// at run time they are concrete) and attributes.
class InferContext {
 public:
  InferContext(const std::string& op, const std::string& node, const std::vector<TensorType>& in,
               const Attrs& attrs)
      : op_(op), node_(node), inputs_(in), attrs_(attrs) {}
  const std::string& op() const { return op_; }
  const std::string& node_name() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const TensorType& input(int i) const { return inputs_.at(i); }
  const std::vector<TensorType>& inputs() const { return inputs_; }
  const Attrs& attrs() const { return attrs_; }
  // Throws kiln::Error: "<op>: <message> (in <node name>)".
  [[noreturn]] void fail(const std::string& message,
                         ErrorCode code = ErrorCode::kInvalidArgument) const;

 private:
  const std::string& op_;
  const std::string& node_;
  const std::vector<TensorType>& inputs_;
  const Attrs& attrs_;
};

// What a kernel sees: concrete inputs, attributes and the inferred output types.
class KernelContext {
 public:
  KernelContext(const std::string& op, const std::string& node, const std::vector<Tensor>& in,
                const Attrs& attrs, const std::vector<TensorType>& out_types)
      : op_(op), node_(node), inputs_(in), attrs_(attrs), output_types_(out_types),
        outputs_(out_types.size()) {}
  const std::string& op() const { return op_; }
  const std::string& node_name() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const Tensor& input(int i) const { return inputs_.at(i); }
  const Attrs& attrs() const { return attrs_; }
  const TensorType& output_type(int i) const { return output_types_.at(i); }
  // Allocates output i with its inferred type, or hands out the buffer preallocated for it.
  Tensor& allocate_output(int i);
  // Offers `buffer` (of output i's type) for allocate_output(i) to return instead of allocating:
  // a compiled executable's planned buffer.
  void preallocate_output(int i, Tensor buffer) { outputs_.at(i) = std::move(buffer); }
  // Sets output i to an existing tensor (it may share an input's storage).
  void set_output(int i, Tensor value);
  std::vector<Tensor>& outputs() { return outputs_; }
  [[noreturn]] void fail(const std::string& message,
                         ErrorCode code = ErrorCode::kInvalidArgument) const;

 private:
  const std::string& op_;
  const std::string& node_;
  const std::vector<Tensor>& inputs_;
  const Attrs& attrs_;
  const std::vector<TensorType>& output_types_;
  std::vector<Tensor> outputs_;
};

// What a gradient rule sees while reverse-mode autodiff builds backward nodes. All tensors
// are symbolic values of the graph being differentiated; the rule composes ordinary ops.
struct GradContext {
  const NodeInfo& node;
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::vector<Tensor> output_grads;  // undefined where an output has no gradient
  const Attrs& attrs() const { return node.attrs; }
};

using ShapeFn = std::function<std::vector<TensorType>(const InferContext&)>;
using KernelFn = std::function<void(KernelContext&)>;
// Returns one gradient per input; an undefined Tensor means "no gradient".
using GradientFn = std::function<std::vector<Tensor>(const GradContext&)>;

// Which ops the compiler is to emit itself (docs/architecture.md). A kCodegen op fuses when it
// has an elemental form or a reduction fold (OpBuilder::elemental / reduction, which set
// kCodegen); tests/compiler/elemental_census_test.cc lists, with the reason, every kCodegen op
// that has neither yet, and fails on any other.
enum class OpKind {
  kCodegen,  // elementwise, layout, reduction: the compiler emits loops for these
  kKernel,   // matmul, convolution, gather, custom ops: served by a registered kernel
};

inline constexpr int kVariadicOutputs = -1;

struct OpDef {
  std::string name;
  std::vector<std::string> inputs;  // input names
  bool variadic = false;            // the last input repeats (concatenate)
  int optional_inputs = 0;          // how many trailing inputs may be left out
  int num_outputs = 1;               // kVariadicOutputs: as many as the shape function says
  OpKind kind = OpKind::kKernel;
  ShapeFn shape_fn;
  GradientFn gradient;
  ElementalFn elemental;              // set: fusible elementwise (kiln/elemental.h)
  std::optional<ReduceKind> reduction;  // set: a fusible reduction over attr "axes"
  IndexMapFn index_map;                 // set: a layout op the compiler reads through
  PiecesFn pieces;                      // set: a piecewise layout op (concatenate, pad)
  bool differentiable = true;
  bool stateful = false;  // never constant-folded or deduplicated
  // Inputs whose values the kernels never read, only their type (a random op's shape_like):
  // a device program hands a host kernel such an input without copying it to the host.
  std::vector<std::string> shape_only_inputs;
  std::string source;     // file:line of the registration
};

class OpRegistry {
 public:
  static OpRegistry& global();
  // Throws kAlreadyExists if the name is taken.
  void add(OpDef def);
  // Throws kNotFound for an unknown name (listing close names).
  const OpDef& find(const std::string& name) const;
  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;
  // Attaches a gradient rule (the op may be registered before or after).
  void set_gradient(const std::string& op, GradientFn fn, bool differentiable = true);
  // A registration made by a static registrar that failed (e.g. a duplicate) is remembered
  // here and thrown on the first use of that op, since throwing during static
  // initialisation would abort the program.
  void defer_error(const std::string& op, const Error& error);

  struct Impl;
  OpRegistry();
  ~OpRegistry();

 private:
  const OpDef& find_locked(const std::string& name) const;
  std::unique_ptr<Impl> impl_;
};

struct KernelDef {
  std::string op;
  DeviceType device = DeviceType::kCpu;
  std::vector<DType> dtypes;  // types of the first input (or first output); empty = any
  KernelFn fn;
  std::string source;
};

class KernelRegistry {
 public:
  static KernelRegistry& global();
  // Throws kAlreadyExists if a kernel for (op, device) already claims one of these dtypes.
  void add(KernelDef def);
  // Throws kNotFound naming the op, device and dtype, and the dtypes that do have kernels.
  const KernelDef& find(const std::string& op, DeviceType device, DType dtype) const;
  bool contains(const std::string& op, DeviceType device, DType dtype) const;

  struct Impl;
  KernelRegistry();
  ~KernelRegistry();

 private:
  const KernelDef& find_locked(const std::string& op, DeviceType device, DType dtype) const;
  std::unique_ptr<Impl> impl_;
};

// Builders behind the registration macros.
class OpBuilder {
 public:
  OpBuilder(std::string name, std::string source);
  OpBuilder& input(std::string name);
  OpBuilder& variadic_input(std::string name);
  OpBuilder& optional_input(std::string name);  // trailing inputs a call may leave out
  OpBuilder& outputs(int n);
  OpBuilder& variadic_outputs() { return outputs(kVariadicOutputs); }
  OpBuilder& kind(OpKind kind);
  // The op's elemental form: one primitive applied to the inputs in order, or a composition.
  // Either makes the op kCodegen.
  OpBuilder& elemental(Prim prim);
  OpBuilder& elemental(ElementalFn fn);
  // The op folds its input over attr "axes" with `kind`; makes the op kCodegen.
  OpBuilder& reduction(ReduceKind kind);
  // The op moves elements of its first input by `map` (kiln/elemental.h); makes it kCodegen.
  OpBuilder& index_map(IndexMapFn map);
  // The op places each input in its piece of the output (kiln/elemental.h); makes it kCodegen.
  OpBuilder& pieces(PiecesFn fn);
  OpBuilder& shape_fn(ShapeFn fn);
  OpBuilder& gradient(GradientFn fn);
  OpBuilder& non_differentiable();
  OpBuilder& stateful();
  // Input `name` (declared before) is read for its type alone (OpDef::shape_only_inputs).
  OpBuilder& shape_only(std::string name);
  const OpDef& def() const { return def_; }

 private:
  OpDef def_;
};

class KernelBuilder {
 public:
  KernelBuilder(std::string op, std::string source);
  KernelBuilder& device(DeviceType device);
  KernelBuilder& dtypes(std::vector<DType> dtypes);
  KernelBuilder& fn(KernelFn fn);
  const KernelDef& def() const { return def_; }

 private:
  KernelDef def_;
};

struct OpRegistrar {
  OpRegistrar(const OpBuilder& builder);  // NOLINT: implicit by design
};
struct KernelRegistrar {
  KernelRegistrar(const KernelBuilder& builder);  // NOLINT
};
struct GradientRegistrar {
  GradientRegistrar(const std::string& op, GradientFn fn);
};

// Runs (or records, inside a graph) the registered op `op` on `inputs`.
std::vector<Tensor> call_op(const std::string& op, const std::vector<Tensor>& inputs,
                            const Attrs& attrs = {});

}  // namespace kiln

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)
#define KILN_STRINGIFY_INNER_(x) #x
#define KILN_STRINGIFY_(x) KILN_STRINGIFY_INNER_(x)
#define KILN_SOURCE_ __FILE__ ":" KILN_STRINGIFY_(__LINE__)

// KILN_REGISTER_OP(my_op).input("x").shape_fn(...);
#define KILN_REGISTER_OP(name)                                                      \
  static const ::kiln::OpRegistrar KILN_CONCAT_(kiln_op_registrar_, __COUNTER__) = \
      ::kiln::OpBuilder(#name, KILN_SOURCE_)

// KILN_REGISTER_KERNEL(my_op).device(kiln::DeviceType::kCpu).dtypes({kiln::f32}).fn(...);
#define KILN_REGISTER_KERNEL(name)                                                          \
  static const ::kiln::KernelRegistrar KILN_CONCAT_(kiln_kernel_registrar_, __COUNTER__) = \
      ::kiln::KernelBuilder(#name, KILN_SOURCE_)

// KILN_REGISTER_GRADIENT(my_op, [](const kiln::GradContext& g) { return ...; });
// The rule may be a lambda with commas in its body: the macro is variadic.
#define KILN_REGISTER_GRADIENT(name, ...)                                                    \
  static const ::kiln::GradientRegistrar KILN_CONCAT_(kiln_grad_registrar_, __COUNTER__)( \
      #name, __VA_ARGS__)

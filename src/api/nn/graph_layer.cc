// GraphLayer: replays an exported graph's nodes on the layer's inputs and weights.
#include "kiln/nn/graph_layer.h"

#include <sstream>

#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/nn/layer_registry.h"
#include "kiln/op_registry.h"
#include "kiln/ops.h"
#include "src/core/tensor_impl.h"

namespace kiln::nn {
namespace {

[[noreturn]] void invalid(const std::string& name, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, "GraphLayer '" + name + "': " + what);
}

int node_of(const Tensor& t) { return t.impl()->node; }

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : "\n") + n;
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

GraphLayer::GraphLayer(io::ExportedGraph graph, bool trainable, std::string name)
    : Layer(std::move(name)), trainable_(trainable) {
  auto sub = std::make_shared<SubGraph>();
  sub->graph = graph.graph;
  for (const auto& [input_name, placeholder] : graph.inputs) {
    sub->params.push_back(placeholder);
    input_names_.push_back(input_name);
  }
  num_inputs_ = static_cast<int64_t>(graph.inputs.size());
  for (const auto& [variable, placeholder] : graph.variables) {
    sub->params.push_back(placeholder);
    initial_values_.push_back(variable.value());
    weight_names_.push_back(variable.name());
  }
  for (const auto& [output_name, value] : graph.outputs) {
    sub->results.push_back(value);
    output_names_.push_back(output_name);
  }
  sub_ = std::move(sub);
  check();
  set_dtype_policy(Policy("float32"));
}

GraphLayer::GraphLayer(std::shared_ptr<const SubGraph> sub, int64_t num_inputs, bool trainable,
                       std::vector<Tensor> initial_values, std::vector<std::string> input_names,
                       std::vector<std::string> output_names)
    : Layer("graph_layer"),
      sub_(std::move(sub)),
      num_inputs_(num_inputs),
      trainable_(trainable),
      initial_values_(std::move(initial_values)),
      input_names_(std::move(input_names)),
      output_names_(std::move(output_names)) {
  set_dtype_policy(Policy("float32"));
}

void GraphLayer::check() const {
  if (num_inputs_ == 0) invalid(name(), "the graph has no inputs");
  if (sub_->results.empty()) invalid(name(), "the graph has no outputs");
  std::vector<bool> fed(sub_->graph.num_nodes(), false);
  for (const Tensor& p : sub_->params) {
    if (!p.defined() || !p.is_symbolic() || p.graph().impl() != sub_->graph.impl())
      invalid(name(), "an input or variable placeholder is not a placeholder of the graph");
    fed[node_of(p)] = true;
  }
  for (int id = 0; id < sub_->graph.num_nodes(); ++id) {
    const NodeInfo n = sub_->graph.node(id);
    if (n.op == "placeholder" && !fed[id]) {
      invalid(name(), "placeholder '" + n.name + "' is neither an input nor a variable's: an "
                      "exported graph feeds every placeholder");
    }
  }
}

Attrs GraphLayer::config() const {
  Attrs c{{"graph", sub_}, {"num_inputs", num_inputs_}, {"trainable", trainable_},
          {"input_names", join(input_names_)}, {"output_names", join(output_names_)},
          {"weight_names", join(weight_names_)}};
  return c;
}

LayerPtr GraphLayer::from_config(const Attrs& c) {
  auto sub = std::make_shared<SubGraph>(c.get_subgraph("graph"));
  const int64_t num_inputs = c.get_int("num_inputs");
  if (num_inputs < 1 || num_inputs > static_cast<int64_t>(sub->params.size()))
    invalid("graph_layer", "num_inputs " + std::to_string(num_inputs) + " does not fit the graph");
  // The weights restore over zeros of the variables' types (the saved model holds their values).
  std::vector<Tensor> initial;
  for (size_t i = static_cast<size_t>(num_inputs); i < sub->params.size(); ++i)
    initial.push_back(zeros(sub->params[i].shape(), sub->params[i].dtype()));
  auto layer = std::shared_ptr<GraphLayer>(new GraphLayer(
      sub, num_inputs, c.get_bool("trainable"), std::move(initial),
      split(c.has("input_names") ? c.get_string("input_names") : ""),
      split(c.has("output_names") ? c.get_string("output_names") : "")));
  if (c.has("weight_names")) layer->weight_names_ = split(c.get_string("weight_names"));
  layer->check();
  return layer;
}

void GraphLayer::build(const std::vector<Shape>& input_shapes) {
  if (static_cast<int64_t>(input_shapes.size()) != num_inputs_) {
    invalid(name(), "takes " + std::to_string(num_inputs_) + " inputs, got " +
                        std::to_string(input_shapes.size()));
  }
  variables_.clear();
  for (size_t i = 0; i < initial_values_.size(); ++i) {
    const Tensor value = initial_values_[i];
    const std::string weight = i < weight_names_.size() && !weight_names_[i].empty()
                                   ? weight_names_[i]
                                   : "weight_" + std::to_string(i);
    variables_.push_back(add_weight(
        weight, value.shape(), [value](const Shape&, DType, uint64_t) { return value; },
        trainable_, value.dtype()));
  }
}

Tensor GraphLayer::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  return call_outputs(inputs, ctx)[0];
}

std::vector<Tensor> GraphLayer::call_outputs(const std::vector<Tensor>& inputs, CallContext& ctx) {
  const Graph& g = sub_->graph;
  std::vector<std::vector<Tensor>> values(g.num_nodes());
  for (int64_t i = 0; i < num_inputs_; ++i) {
    const Tensor& want = sub_->params[i];
    const Tensor& x = inputs[i];
    bool fits = x.dtype() == want.dtype() && x.rank() == want.rank();
    for (int64_t d = 0; fits && d < x.rank(); ++d)
      fits = want.shape()[d] == kUnknownDim || x.shape()[d] == kUnknownDim ||
             want.shape()[d] == x.shape()[d];
    if (!fits) {
      invalid(name(), "input " + std::to_string(i) + " ('" + input_names_.at(i) + "') must be " +
                          TensorType{want.dtype(), want.shape()}.str() + ", got " +
                          TensorType{x.dtype(), x.shape()}.str());
    }
    values[node_of(want)] = {x};
  }
  for (size_t i = 0; i < variables_.size(); ++i)
    values[node_of(sub_->params[num_inputs_ + i])] = {ctx.read(variables_[i])};
  // Only the nodes the outputs need, in order (a node's inputs come before it).
  std::vector<bool> needed(g.num_nodes(), false);
  for (const Tensor& r : sub_->results) needed[node_of(r)] = true;
  for (int id = g.num_nodes() - 1; id >= 0; --id) {
    if (!needed[id] || !values[id].empty()) continue;
    for (const ValueRef& in : g.node(id).inputs) needed[in.node] = true;
  }
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (!needed[id] || !values[id].empty()) continue;
    const NodeInfo n = g.node(id);
    if (n.op == "constant") {
      values[id] = {n.attrs.get_tensor("value")};
      continue;
    }
    std::vector<Tensor> args;
    for (const ValueRef& in : n.inputs) args.push_back(values[in.node].at(in.output));
    values[id] = call_op(n.op, args, n.attrs);
  }
  std::vector<Tensor> out;
  for (const Tensor& r : sub_->results) out.push_back(values[node_of(r)].at(r.impl()->output));
  return out;
}

KILN_REGISTER_LAYER("GraphLayer", GraphLayer::from_config);

}  // namespace kiln::nn

// Tensors, types and attributes to and from the saved-model protobufs (saved_model.proto), for
// exported models and whole-model saves.
#include "src/api/io/proto_codec.h"

#include <type_traits>
#include <variant>

#include "kiln/op_registry.h"
#include "src/core/tensor_impl.h"
#include "src/api/io/tensor_codec.h"

namespace kiln::io::internal {
namespace saved = proto::saved;
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

}  // namespace

// ---- to proto ----

void set_type(saved::TensorTypeDef* out, const TensorType& type) {
  out->set_dtype(internal::to_proto(type.dtype));
  for (int64_t d : type.shape) out->add_shape(d);
}

void set_tensor(saved::TensorValue* out, const Tensor& t) {
  out->set_dtype(internal::to_proto(t.dtype()));
  for (int64_t d : t.shape()) out->add_shape(d);
  out->set_data(static_cast<const char*>(t.raw_data()), t.nbytes());
}

void set_subgraph(saved::SubGraphDef* out, const SubGraph& sub) {
  const Graph& g = sub.graph;
  out->set_name(g.name());
  for (int id = 0; id < g.num_nodes(); ++id) {
    const NodeInfo node = g.node(id);
    saved::NodeDef* n = out->add_nodes();
    n->set_name(node.name);
    n->set_op(node.op);
    for (const ValueRef& in : node.inputs) {
      saved::NodeInput* ref = n->add_inputs();
      ref->set_node(in.node);
      ref->set_output(in.output);
    }
    for (const auto& [name, value] : node.attrs.values())
      set_attr(n->add_attrs(), name, value, node.name);
    for (const TensorType& t : node.outputs) set_type(n->add_outputs(), t);
  }
  for (const Tensor& p : sub.params) {
    saved::NodeInput* ref = out->add_params();
    ref->set_node(p.impl()->node);
  }
  for (const Tensor& r : sub.results) {
    saved::NodeInput* ref = out->add_results();
    ref->set_node(r.impl()->node);
    ref->set_output(r.impl()->output);
  }
}

void set_attr(saved::AttrDef* out, const std::string& name, const AttrValue& value,
              const std::string& node) {
  out->set_name(name);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out->set_i(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out->set_f(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out->set_b(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out->set_s(v);
        } else if constexpr (std::is_same_v<T, DType>) {
          out->set_dtype(internal::to_proto(v));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          for (int64_t x : v) out->mutable_ints()->add_values(x);
          out->mutable_ints();  // an empty list is still a list
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          for (double x : v) out->mutable_floats()->add_values(x);
          out->mutable_floats();
        } else if constexpr (std::is_same_v<T, std::shared_ptr<const SubGraph>>) {
          set_subgraph(out->mutable_subgraph(), *v);
        } else {
          static_assert(std::is_same_v<T, Tensor>);
          if (!v.defined() || v.is_symbolic()) {
            fail(ErrorCode::kInvalidArgument, "save_model: attribute '" + name + "' of node '" +
                                                  node + "' is not a concrete tensor");
          }
          set_tensor(out->mutable_tensor(), v);
        }
      },
      value);
}

// ---- from proto, checking everything ----

void Source::corrupt(const std::string& what) const {
  fail(ErrorCode::kDataLoss, "load_model: " + file + ": " + what);
}

DType dtype_from(int value, const Source& src, const std::string& where) {
  std::optional<DType> d = internal::from_proto(value);
  if (!d) src.corrupt(where + ": unknown dtype " + std::to_string(value));
  return *d;
}

TensorType type_from(const saved::TensorTypeDef& t, const Source& src, const std::string& where) {
  TensorType out{dtype_from(t.dtype(), src, where), Shape(t.shape().begin(), t.shape().end())};
  for (int64_t d : out.shape) {
    if (d < kUnknownDim) src.corrupt(where + ": invalid dimension " + std::to_string(d));
  }
  return out;
}

Tensor tensor_from(const saved::TensorValue& t, const Source& src, const std::string& where) {
  const DType dtype = dtype_from(t.dtype(), src, where);
  Shape shape(t.shape().begin(), t.shape().end());
  std::optional<uint64_t> nbytes = internal::checked_nbytes(dtype, shape);
  if (!nbytes) src.corrupt(where + ": invalid tensor shape " + shape_str(shape));
  if (*nbytes != t.data().size()) {
    src.corrupt(where + ": a " + dtype_name(dtype) + shape_str(shape) + " tensor needs " +
                std::to_string(*nbytes) + " bytes, the file has " +
                std::to_string(t.data().size()));
  }
  if (dtype == bool_ && !internal::valid_bools(t.data().data(), t.data().size())) {
    src.corrupt(where + ": a bool value is neither 0 nor 1");
  }
  return Tensor::from_bytes(dtype, std::move(shape), t.data().data(), t.data().size());
}

std::shared_ptr<const SubGraph> subgraph_from(const saved::SubGraphDef& def, const Source& src,
                                              const std::string& where) {
  auto sub = std::make_shared<SubGraph>();
  sub->graph = Graph(def.name().empty() ? "subgraph" : def.name());
  Graph& g = sub->graph;
  auto guard = g.as_default();
  std::vector<std::vector<Tensor>> values(def.nodes_size());
  auto value_at = [&](const saved::NodeInput& in, int before, const std::string& at) {
    if (in.node() < 0 || in.node() >= before || in.output() < 0 ||
        in.output() >= static_cast<int>(values[in.node()].size())) {
      src.corrupt(at + " refers to node " + std::to_string(in.node()) + " output " +
                  std::to_string(in.output()) + ", which is not an earlier value");
    }
    return values[in.node()][in.output()];
  };
  for (int i = 0; i < def.nodes_size(); ++i) {
    const saved::NodeDef& node = def.nodes(i);
    const std::string at = where + ", sub-graph node " + std::to_string(i) + " ('" +
                           node.name() + "', op " + node.op() + ")";
    std::vector<TensorType> saved_types;
    for (const saved::TensorTypeDef& t : node.outputs()) saved_types.push_back(type_from(t, src, at));
    Attrs attrs = attrs_from(node.attrs(), src, at);
    std::vector<Tensor> inputs;
    for (const saved::NodeInput& in : node.inputs()) inputs.push_back(value_at(in, i, at));
    try {
      if (node.op() == "placeholder" || node.op() == "constant") {
        if (!inputs.empty() || saved_types.size() != 1) src.corrupt(at + ": malformed " + node.op());
        values[i] = {node.op() == "placeholder"
                         ? g.placeholder(saved_types[0].dtype, saved_types[0].shape, "param")
                         : g.constant(attrs.get_tensor("value"))};
      } else {
        values[i] = call_op(node.op(), inputs, attrs);
      }
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kDataLoss) throw;
      src.corrupt(at + ": " + e.what());
    }
    std::vector<TensorType> got;
    for (const Tensor& t : values[i]) got.push_back({t.dtype(), t.shape()});
    if (got != saved_types) src.corrupt(at + ": the op now gives other types than the file says");
  }
  for (const saved::NodeInput& p : def.params()) {
    Tensor t = value_at(p, def.nodes_size(), where + ", a sub-graph parameter");
    if (def.nodes(p.node()).op() != "placeholder")
      src.corrupt(where + ": sub-graph parameter " + std::to_string(p.node()) + " is not a placeholder");
    sub->params.push_back(t);
  }
  for (const saved::NodeInput& r : def.results())
    sub->results.push_back(value_at(r, def.nodes_size(), where + ", a sub-graph result"));
  return sub;
}

Attrs attrs_from(const google::protobuf::RepeatedPtrField<saved::AttrDef>& list, const Source& src,
                 const std::string& where) {
  Attrs attrs;
  for (const saved::AttrDef& a : list) {
    const std::string at = where + ", attribute '" + a.name() + "'";
    if (attrs.has(a.name())) src.corrupt(at + " appears twice");
    switch (a.value_case()) {
      case saved::AttrDef::kI:
        attrs.set(a.name(), static_cast<int64_t>(a.i()));
        break;
      case saved::AttrDef::kF:
        attrs.set(a.name(), a.f());
        break;
      case saved::AttrDef::kB:
        attrs.set(a.name(), a.b());
        break;
      case saved::AttrDef::kS:
        attrs.set(a.name(), a.s());
        break;
      case saved::AttrDef::kDtype:
        attrs.set(a.name(), dtype_from(a.dtype(), src, at));
        break;
      case saved::AttrDef::kInts:
        attrs.set(a.name(),
                  std::vector<int64_t>(a.ints().values().begin(), a.ints().values().end()));
        break;
      case saved::AttrDef::kFloats:
        attrs.set(a.name(),
                  std::vector<double>(a.floats().values().begin(), a.floats().values().end()));
        break;
      case saved::AttrDef::kTensor:
        attrs.set(a.name(), tensor_from(a.tensor(), src, at));
        break;
      case saved::AttrDef::kSubgraph:
        attrs.set(a.name(), subgraph_from(a.subgraph(), src, at));
        break;
      default:
        src.corrupt(at + " has no value");
    }
  }
  return attrs;
}

}  // namespace kiln::io::internal

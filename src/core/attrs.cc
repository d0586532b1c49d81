// Typed attribute access with errors that name the attribute.
#include "kiln/attrs.h"

#include <sstream>

#include "kiln/graph.h"

namespace kiln {
namespace {

const char* kind_name(const AttrValue& v) {
  static const char* names[] = {"int", "float", "bool", "string", "dtype", "ints", "floats",
                                "tensor", "subgraph"};
  return names[v.index()];
}

template <class T>
const T& get_as(const std::map<std::string, AttrValue>& values, const std::string& name,
                const char* wanted) {
  auto it = values.find(name);
  if (it == values.end()) {
    throw Error(ErrorCode::kInvalidArgument, "missing attribute '" + name + "'");
  }
  const T* v = std::get_if<T>(&it->second);
  if (!v) {
    throw Error(ErrorCode::kInvalidArgument, "attribute '" + name + "' is a " +
                                                 kind_name(it->second) + ", expected " + wanted);
  }
  return *v;
}

template <class T>
std::string list_str(const std::vector<T>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << "]";
  return os.str();
}

std::string value_str(const AttrValue& v) {
  struct Visitor {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const {
      std::ostringstream os;
      os << x;
      return os.str();
    }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return "\"" + x + "\""; }
    std::string operator()(DType x) const { return dtype_name(x); }
    std::string operator()(const std::vector<int64_t>& x) const { return list_str(x); }
    std::string operator()(const std::vector<double>& x) const { return list_str(x); }
    std::string operator()(const Tensor& t) const {
      if (!t.defined() || t.is_symbolic() || t.size() > 8)
        return std::string(dtype_name(t.dtype())) + shape_str(t.shape());
      std::string s = t.str();  // "tensor(..., dtype=...)": keep the values only
      return s.substr(7, s.rfind(", dtype=") - 7);
    }
    std::string operator()(const std::shared_ptr<const SubGraph>& g) const {
      if (!g) return "subgraph(null)";
      return "subgraph(" + g->graph.name() + ", " + std::to_string(g->graph.num_nodes()) +
             " nodes)";
    }
  };
  return std::visit(Visitor{}, v);
}

}  // namespace

int64_t Attrs::get_int(const std::string& name) const {
  return get_as<int64_t>(values_, name, "an int");
}
double Attrs::get_float(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) {
    if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  }
  return get_as<double>(values_, name, "a float");
}
bool Attrs::get_bool(const std::string& name) const { return get_as<bool>(values_, name, "a bool"); }
const std::string& Attrs::get_string(const std::string& name) const {
  return get_as<std::string>(values_, name, "a string");
}
DType Attrs::get_dtype(const std::string& name) const {
  return get_as<DType>(values_, name, "a dtype");
}
const std::vector<int64_t>& Attrs::get_ints(const std::string& name) const {
  return get_as<std::vector<int64_t>>(values_, name, "a list of ints");
}
const std::vector<double>& Attrs::get_floats(const std::string& name) const {
  return get_as<std::vector<double>>(values_, name, "a list of floats");
}
const Tensor& Attrs::get_tensor(const std::string& name) const {
  return get_as<Tensor>(values_, name, "a tensor");
}

const SubGraph& Attrs::get_subgraph(const std::string& name) const {
  const auto& g = get_as<std::shared_ptr<const SubGraph>>(values_, name, "a subgraph");
  if (!g) throw Error(ErrorCode::kInvalidArgument, "attribute '" + name + "' is a null subgraph");
  return *g;
}

std::string Attrs::str() const {
  std::string s;
  for (const auto& [name, value] : values_) {
    if (!s.empty()) s += ", ";
    s += name + "=" + value_str(value);
  }
  return s;
}

bool Attrs::operator==(const Attrs& other) const {
  if (values_.size() != other.values_.size()) return false;
  for (const auto& [name, value] : values_) {
    auto it = other.values_.find(name);
    if (it == other.values_.end() || it->second.index() != value.index()) return false;
    bool same = std::visit(
        [&](const auto& a) {
          using A = std::decay_t<decltype(a)>;
          const A& b = std::get<A>(it->second);
          // Tensors compare by identity of their storage (cheap, and safe for CSE).
          if constexpr (std::is_same_v<A, Tensor>) return a.impl() == b.impl();
          else return a == b;
        },
        value);
    if (!same) return false;
  }
  return true;
}

}  // namespace kiln

// Attributes of a node: named compile-time values (axes, shapes, dtypes, constants).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace kiln {

struct SubGraph;  // kiln/graph.h: a traced function (a branch of cond, the body of a loop)

using AttrValue = std::variant<int64_t, double, bool, std::string, DType, std::vector<int64_t>,
                               std::vector<double>, Tensor, std::shared_ptr<const SubGraph>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}

  Attrs& set(const std::string& name, AttrValue value) {
    values_[name] = std::move(value);
    return *this;
  }
  bool has(const std::string& name) const { return values_.count(name) != 0; }

  // Typed reads; a missing or mistyped attribute throws kiln::Error naming it.
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;  // accepts an int too
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  DType get_dtype(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::vector<double>& get_floats(const std::string& name) const;
  const Tensor& get_tensor(const std::string& name) const;
  const SubGraph& get_subgraph(const std::string& name) const;

  int64_t get_int(const std::string& name, int64_t fallback) const {
    return has(name) ? get_int(name) : fallback;
  }
  double get_float(const std::string& name, double fallback) const {
    return has(name) ? get_float(name) : fallback;
  }
  bool get_bool(const std::string& name, bool fallback) const {
    return has(name) ? get_bool(name) : fallback;
  }

  const std::map<std::string, AttrValue>& values() const { return values_; }
  // "axes=[0,1], keepdims=true" (tensor values are summarised).
  std::string str() const;
  bool operator==(const Attrs& other) const;

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace kiln

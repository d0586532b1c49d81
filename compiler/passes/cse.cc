// Value numbering over the forward sweep: a pure node equal to an earlier one (same op, same
// rewritten inputs, equal attributes) is replaced by it.
#include "compiler/passes/cse.h"

#include <string_view>
#include <unordered_map>

namespace kiln::compiler {
namespace {

std::string_view bytes_of(const Tensor& t) {
  return {static_cast<const char*>(t.raw_data()), t.nbytes()};
}

// Constants are equal when their bytes are (Attrs compare tensors by identity): 1.0 recorded
// ten times is one constant. Bytes, not values, so -0.0 and 0.0 stay apart.
bool same_value(const detail::Node& a, const detail::Node& b) {
  if (a.op != "constant") return a.attrs == b.attrs;
  const Tensor& x = a.attrs.get_tensor("value");
  const Tensor& y = b.attrs.get_tensor("value");
  return x.dtype() == y.dtype() && x.shape() == y.shape() && bytes_of(x) == bytes_of(y);
}

std::string key_of(const detail::Node& node) {
  std::string key = node.op;
  if (node.op == "constant") {
    const Tensor& value = node.attrs.get_tensor("value");
    key.append("|").append(std::to_string(std::hash<std::string_view>{}(bytes_of(value))));
  }
  for (ValueRef in : node.inputs) {
    key.append("|").append(std::to_string(in.node)).append(":").append(std::to_string(in.output));
  }
  return key;
}

}  // namespace

bool Cse::run(Module& module) {
  Rewriter rw(module);
  std::unordered_multimap<std::string, int> seen;    // key -> new node id, pure nodes
  std::unordered_multimap<std::string, int> unique;  // the same for random and stateful nodes
  auto find = [&](const std::unordered_multimap<std::string, int>& table, const std::string& key,
                  const detail::Node& node) {
    auto [begin, end] = table.equal_range(key);
    for (auto it = begin; it != end; ++it) {
      const detail::Node& other = rw.new_node(it->second);
      if (other.outputs == node.outputs && same_value(other, node)) return it->second;
    }
    return -1;
  };
  bool changed = false;
  for (int id = 0; id < rw.num_old(); ++id) {
    const detail::Node& old = rw.old_node(id);
    detail::Node node = old;
    for (ValueRef& in : node.inputs) in = rw.map(in);
    std::string key = key_of(node);
    if (old.op == "placeholder") {
      rw.replace(id, std::move(node));
      continue;
    }
    if (!is_pure(old)) {
      if (int twin = find(unique, key, node); twin >= 0) {
        note("'" + old.name + "' equals '" + rw.new_node(twin).name + "' but " + old.op +
             " is random or stateful: not merged");
      }
      unique.emplace(key, rw.replace(id, std::move(node)));
      continue;
    }
    int match = find(seen, key, node);
    if (match < 0) {
      seen.emplace(key, rw.replace(id, std::move(node)));
      continue;
    }
    std::vector<ValueRef> values;
    for (size_t o = 0; o < old.outputs.size(); ++o) values.push_back({match, static_cast<int>(o)});
    rw.alias(id, std::move(values));
    changed = true;
  }
  if (!changed) return false;
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler

// A scan and its augmented copy, merged (compiler/passes/merge_scans.h).
#include "compiler/passes/merge_scans.h"

#include <map>
#include <variant>

namespace kiln::compiler {
namespace {

using SubPtr = std::shared_ptr<const SubGraph>;

SubPtr sub_attr(const detail::Node& n, const char* name) {
  auto it = n.attrs.values().find(name);
  if (it == n.attrs.values().end()) return nullptr;
  const SubPtr* p = std::get_if<SubPtr>(&it->second);
  return p ? *p : nullptr;
}

// Whether `aug` is `scan`'s augmented copy: same inputs and steps, body named by "augments".
bool augments(const detail::Node& aug, const detail::Node& scan) {
  if (scan.op != "scan" || aug.op != "scan" || scan.inputs != aug.inputs) return false;
  SubPtr body = sub_attr(scan, "body");
  if (!body || sub_attr(aug, "augments") != body) return false;
  for (const char* a : {"num_carry", "num_xs", "length"})
    if (scan.attrs.get_int(a) != aug.attrs.get_int(a)) return false;
  if (scan.attrs.get_bool("reverse", false) != aug.attrs.get_bool("reverse", false)) return false;
  if (aug.outputs.size() < scan.outputs.size()) return false;
  for (size_t k = 0; k < scan.outputs.size(); ++k)
    if (aug.outputs[k] != scan.outputs[k]) return false;
  return true;
}

}  // namespace

bool MergeAugmentedScans::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  std::map<int, int> merged_into;  // original scan -> its augmented copy
  for (int m = 0; m < static_cast<int>(nodes.size()); ++m) {
    if (nodes[m].op != "scan" || !sub_attr(nodes[m], "augments")) continue;
    for (int n = 0; n < m; ++n) {
      if (merged_into.count(n) || !augments(nodes[m], nodes[n])) continue;
      merged_into[n] = m;
      break;
    }
  }
  if (merged_into.empty()) return false;
  Rewriter rw(module);
  std::map<int, int> emitted;  // augmented copy -> its new node
  for (int id = 0; id < rw.num_old(); ++id) {
    if (auto it = merged_into.find(id); it != merged_into.end()) {
      detail::Node copy = rw.old_node(it->second);
      for (ValueRef& in : copy.inputs) in = rw.map(in);
      const int new_id = rw.replace(id, std::move(copy));
      emitted[it->second] = new_id;
      std::vector<ValueRef> values;
      for (size_t k = 0; k < nodes[id].outputs.size(); ++k)
        values.push_back({new_id, static_cast<int>(k)});
      rw.alias(id, values);
      note("scan '" + nodes[id].name + "' reads its augmented copy '" + nodes[it->second].name +
           "'");
    } else if (auto e = emitted.find(id); e != emitted.end()) {
      std::vector<ValueRef> values;
      for (size_t k = 0; k < nodes[id].outputs.size(); ++k)
        values.push_back({e->second, static_cast<int>(k)});
      rw.alias(id, values);
    } else {
      rw.keep(id);
    }
  }
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler

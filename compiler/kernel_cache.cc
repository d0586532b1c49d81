// The fused-kernel cache: a bounded LRU map from structural keys to JIT'd functions (and the
// JIT sessions that own their code). Compiles outside the lock; the first result stored wins.
#include "compiler/kernel_cache.h"

#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace kiln::compiler {
namespace {

constexpr size_t kCapacity = 1024;

struct Entry {
  std::string key;
  cpu::KernelFn fn = nullptr;
  std::shared_ptr<void> jit;
  cpu::FusedKernel::PartFn part_fn = nullptr;  // reductions split into chunks
  int64_t split_size = 0;
};

struct Cache {
  std::mutex mu;
  std::list<Entry> lru;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index;
  KernelCacheStats stats;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: kernels may run during static destruction
  return *c;
}

}  // namespace

std::string kernel_cache_key(const cpu::FusedSubgraph& sg) {
  Shape out = sg.iteration_shape();
  const bool flat = !sg.has_reductions() && cpu::is_flat_loop(sg, out);
  const int64_t n = num_elements(out);
  std::string key = flat ? "flat|" : "shaped" + shape_str(out) + "|";
  if (sg.has_reductions()) {
    key += "reduce";
    for (int64_t a : sg.reduce_axes) key += std::to_string(a) + ",";
    key += "|";
  }
  for (const auto& in : sg.inputs) {
    key += dtype_name(in.dtype);
    if (flat) {
      key += num_elements(in.shape) == 1 && n != 1 ? "s" : "v";
    } else {
      key += shape_str(in.shape);
    }
    key += ",";
  }
  key += "|";
  for (const auto& node : sg.nodes) {
    key += node.reduce ? cpu::reduce_kind_name(*node.reduce) : cpu::elt_op_name(node.op);
    key += "(";
    for (int a : node.args) key += std::to_string(a) + ",";
    key += std::string(")") + dtype_name(node.dtype) + ";";
  }
  key += "|";
  for (int o : sg.outputs) key += std::to_string(o) + ",";
  return key;
}

cpu::FusedKernel cached_kernel(const cpu::FusedSubgraph& sg) {
  sg.validate();
  std::string key = kernel_cache_key(sg);
  Shape shape = sg.iteration_shape();
  // As compile_elementwise decides it (the key above never lets sizes vary for reductions).
  bool flat = cpu::is_flat_loop(sg, shape) || shape.empty() || num_elements(shape) == 0;
  Cache& c = cache();
  {
    std::lock_guard lock(c.mu);
    if (auto it = c.index.find(key); it != c.index.end()) {
      ++c.stats.hits;
      c.lru.splice(c.lru.begin(), c.lru, it->second);
      const Entry& e = c.lru.front();
      cpu::FusedKernel k(sg, std::move(shape), e.fn, e.jit, flat, /*compile_ms=*/0);
      if (e.part_fn) k.set_split(e.part_fn, e.split_size);
      return k;
    }
  }
  cpu::FusedKernel kernel = cpu::compile_elementwise(sg);
  std::lock_guard lock(c.mu);
  ++c.stats.misses;
  c.stats.compile_ms += kernel.compile_ms();
  if (!c.index.count(key)) {
    c.lru.push_front(
        Entry{key, kernel.fn(), kernel.jit_owner(), kernel.part_fn(), kernel.split_size()});
    c.index[key] = c.lru.begin();
    while (c.lru.size() > kCapacity) {
      c.index.erase(c.lru.back().key);
      c.lru.pop_back();
    }
  }
  return kernel;
}

KernelCacheStats kernel_cache_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  KernelCacheStats s = c.stats;
  s.entries = static_cast<int64_t>(c.lru.size());
  return s;
}

}  // namespace kiln::compiler

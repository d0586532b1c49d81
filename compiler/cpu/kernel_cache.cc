// The fused-kernel cache: a bounded LRU map from structural keys to JIT'd functions (and the
// JIT sessions that own their code). Compiles outside the lock; the first result stored wins.
#include "compiler/cpu/kernel_cache.h"

#include <algorithm>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "compiler/cpu/fusion_target.h"
#include "compiler/dump.h"
#include "compiler/llvm_ir/loop_target.h"
#include "runtime/thread_pool.h"

namespace kiln::compiler {
namespace {

constexpr size_t kCapacity = 1024;

struct Entry {
  std::string key;
  cpu::KernelFn fn = nullptr;
  std::shared_ptr<void> jit;
  cpu::FusedKernel::PartFn part_fn = nullptr;  // reductions split into chunks
  int64_t split_size = 0;
  cpu::GridFn grid_fn = nullptr;  // the grid-kernel test mode's
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

std::string kernel_cache_key(const FusedSubgraph& sg) {
  // A grid kernel bakes its item count in (the grid-kernel test mode, fused_kernel.h): every
  // size its own entry there.
  return llvm_ir::structural_key(sg, /*size_free_flat_loops=*/!cpu::grid_kernels_for_tests());
}

namespace {

// The kernel of a cache entry for `sg` (whose key matched).
cpu::FusedKernel from_entry(const FusedSubgraph& sg, const Entry& e) {
  Shape shape = sg.iteration_shape();
  // As compile_elementwise decides it (the key never lets sizes vary for reductions).
  bool flat = llvm_ir::flat_loop_for(sg, shape);
  cpu::FusedKernel k(sg, std::move(shape), e.fn, e.jit, flat, /*compile_ms=*/0);
  if (e.part_fn) k.set_split(e.part_fn, e.split_size);
  if (e.grid_fn) k.set_grid(e.grid_fn);
  return k;
}

void store(Cache& c, const std::string& key, const cpu::FusedKernel& kernel) {
  ++c.stats.misses;
  c.stats.compile_ms += kernel.compile_ms();
  if (c.index.count(key)) return;
  c.lru.push_front(
      Entry{key, kernel.fn(), kernel.jit_owner(), kernel.part_fn(), kernel.split_size(),
            kernel.grid_fn()});
  c.index[key] = c.lru.begin();
  while (c.lru.size() > kCapacity) {
    c.index.erase(c.lru.back().key);
    c.lru.pop_back();
  }
}

}  // namespace

std::vector<cpu::FusedKernel> cached_kernels(const std::vector<FusedSubgraph>& sgs,
                                             std::vector<std::string>* errors) {
  const size_t n = sgs.size();
  std::vector<cpu::FusedKernel> kernels(n);
  errors->assign(n, "");
  std::vector<std::string> keys(n);
  std::vector<size_t> missing;  // first occurrence of each key not cached
  std::vector<int> same_as(n, -1);  // a later duplicate of a missing key
  // A compile that dumps JITs all its kernels afresh, so that its dump holds each one's IR.
  const std::string dump_dir = current_dump_dir();
  Cache& c = cache();
  {
    std::lock_guard lock(c.mu);
    std::unordered_map<std::string, size_t> pending;
    for (size_t i = 0; i < n; ++i) {
      try {
        sgs[i].validate(cpu::fusion_target());
        keys[i] = kernel_cache_key(sgs[i]);
      } catch (const Error& e) {
        (*errors)[i] = e.what();
        continue;
      }
      if (auto it = c.index.find(keys[i]); dump_dir.empty() && it != c.index.end()) {
        ++c.stats.hits;
        c.lru.splice(c.lru.begin(), c.lru, it->second);
        kernels[i] = from_entry(sgs[i], c.lru.front());
      } else if (auto p = pending.find(keys[i]); p != pending.end()) {
        same_as[i] = static_cast<int>(p->second);
      } else {
        pending[keys[i]] = i;
        missing.push_back(i);
      }
    }
  }
  if (!missing.empty()) {
    std::vector<FusedSubgraph> batch;
    for (size_t i : missing) batch.push_back(sgs[i]);
    // One module per pool thread (each its own LLVM context and JIT session), compiled in
    // parallel: kernels dealt round-robin by size so the parts take about as long.
    const int64_t parts = std::min<int64_t>(runtime::ThreadPool::global().num_threads(),
                                            static_cast<int64_t>(batch.size()));
    std::vector<size_t> order(batch.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return batch[a].nodes.size() > batch[b].nodes.size();
    });
    std::vector<std::vector<size_t>> part_of(parts);
    for (size_t k = 0; k < order.size(); ++k) part_of[k % parts].push_back(order[k]);
    std::vector<cpu::FusedKernel> compiled(batch.size());
    runtime::parallel_for(parts, 1, [&](int64_t begin, int64_t end) {
      DumpScope dump(dump_dir);  // on a pool thread: the compile's directory
      for (int64_t p = begin; p < end; ++p) {
        std::vector<FusedSubgraph> sub;
        for (size_t k : part_of[p]) sub.push_back(batch[k]);
        try {
          std::vector<cpu::FusedKernel> got = cpu::compile_elementwise(sub);
          for (size_t j = 0; j < got.size(); ++j) compiled[part_of[p][j]] = std::move(got[j]);
        } catch (const Error&) {
          // One of them fails: compile them one by one to tell which.
          for (size_t k : part_of[p]) {
            try {
              compiled[k] = cpu::compile_elementwise(batch[k]);
            } catch (const Error& e) {
              (*errors)[missing[k]] = e.what();
            }
          }
        }
      }
    });
    std::lock_guard lock(c.mu);
    for (size_t k = 0; k < missing.size(); ++k) {
      if (compiled[k].fn() == nullptr) continue;
      store(c, keys[missing[k]], compiled[k]);
      kernels[missing[k]] = std::move(compiled[k]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (same_as[i] < 0) continue;
    const cpu::FusedKernel& first = kernels[same_as[i]];
    if (first.fn() == nullptr) {
      (*errors)[i] = (*errors)[same_as[i]];
      continue;
    }
    Entry e{keys[i],           first.fn(),         first.jit_owner(),
            first.part_fn(),   first.split_size(), first.grid_fn()};
    kernels[i] = from_entry(sgs[i], e);
  }
  return kernels;
}

cpu::FusedKernel cached_kernel(const FusedSubgraph& sg) {
  std::vector<std::string> errors;
  std::vector<cpu::FusedKernel> k = cached_kernels({sg}, &errors);
  if (!errors[0].empty()) {
    // Recompile to rethrow with the error's own code (kInvalidArgument, kUnimplemented, ...).
    return cpu::compile_elementwise(sg);
  }
  return std::move(k[0]);
}

KernelCacheStats kernel_cache_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  KernelCacheStats s = c.stats;
  s.entries = static_cast<int64_t>(c.lru.size());
  return s;
}

}  // namespace kiln::compiler

// A small LRU cache of Executables keyed by (graph identity and size, outputs, feed dtypes and
// shapes): the caller runs a graph with unknown dims and the cache compiles once per input
// signature. Counts hits, misses, recompiles (a known graph seen with a new signature) and
// evictions.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/executable.h"

namespace kiln::compiler {

class CompileCache {
 public:
  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;
    int64_t recompiles = 0;  // misses for a (graph, outputs) already compiled for another signature
    int64_t evictions = 0;
  };

  // Every program is compiled with `options` (its device).
  explicit CompileCache(size_t capacity = 8, CompileOptions options = {});

  // The executable for these outputs and the feeds' signature, compiled on a miss (with
  // `donations`, which are part of the key).
  std::shared_ptr<const Executable> get(const Graph& graph, const std::vector<Tensor>& outputs,
                                        const FeedList& feeds,
                                        const std::vector<Donation>& donations = {});
  std::vector<Tensor> run(const Graph& graph, const std::vector<Tensor>& outputs,
                          const FeedList& feeds) {
    return get(graph, outputs, feeds)->run(feeds);
  }

  Stats stats() const;
  size_t size() const;
  void clear();

 private:
  using Key = std::vector<int64_t>;
  struct Entry {
    Graph graph;    // keeps the identity alive (no address reuse)
    Key program;    // graph size, outputs and donations
    Key signature;  // feed dtypes and shapes
    std::shared_ptr<const Executable> executable;
  };
  size_t capacity_;
  CompileOptions options_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // most recently used first
  // Programs compiled at least once (weak: a dropped graph is forgotten).
  std::vector<std::pair<std::weak_ptr<detail::GraphImpl>, Key>> seen_;
  Stats stats_;
};

}  // namespace kiln::compiler

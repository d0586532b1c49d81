// The LRU cache of Executables per (graph, outputs, feed signature).
#include "compiler/compile_cache.h"

#include <algorithm>

#include "src/core/tensor_impl.h"

namespace kiln::compiler {

CompileCache::CompileCache(size_t capacity, CompileOptions options)
    : capacity_(std::max<size_t>(capacity, 1)), options_(options) {}

std::shared_ptr<const Executable> CompileCache::get(const Graph& graph,
                                                    const std::vector<Tensor>& outputs,
                                                    const FeedList& feeds,
                                                    const std::vector<Donation>& donations) {
  // Keys are integer sequences, not strings: Model::fit looks its step up on every batch.
  Key program = {graph.num_nodes()};
  for (const Tensor& t : outputs) {
    if (!t.defined() || !t.is_symbolic() || t.impl()->graph != graph.impl()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CompileCache: an output is not a value of graph '" + graph.name() + "'");
    }
    program.insert(program.end(), {t.impl()->node, t.impl()->output});
  }
  program.push_back(-1);  // then the donations
  for (const Donation& d : donations) {
    if (!d.feed.defined() || !d.feed.is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CompileCache: a donation's feed is not a placeholder");
    }
    program.insert(program.end(), {d.feed.impl()->node, d.output});
  }
  std::vector<std::pair<int64_t, const Tensor*>> fed;  // by placeholder node
  fed.reserve(feeds.size());
  for (const auto& [key, value] : feeds) {
    if (!key.defined() || !key.is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument, "CompileCache: a feed key is not a placeholder");
    }
    if (!value.defined()) {
      throw Error(ErrorCode::kInvalidArgument, "CompileCache: the value fed to placeholder '" +
                                                   graph.node(key.impl()->node).name +
                                                   "' of graph '" + graph.name() +
                                                   "' is an undefined tensor");
    }
    fed.emplace_back(key.impl()->node, &value);
  }
  std::sort(fed.begin(), fed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Key signature;  // per feed: node, dtype, rank, dims
  for (const auto& [node, value] : fed) {
    signature.insert(signature.end(), {node, static_cast<int64_t>(value->dtype()),
                                       static_cast<int64_t>(value->shape().size())});
    signature.insert(signature.end(), value->shape().begin(), value->shape().end());
  }

  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->graph == graph && it->program == program && it->signature == signature) {
      ++stats_.hits;
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().executable;
    }
  }
  ++stats_.misses;
  std::erase_if(seen_, [](const auto& s) { return s.first.expired(); });
  bool known = std::any_of(seen_.begin(), seen_.end(), [&](const auto& s) {
    return s.first.lock() == graph.impl() && s.second == program;
  });
  if (known) ++stats_.recompiles;
  auto exe = std::make_shared<const Executable>(compile(graph, outputs, feeds, donations, options_));
  if (!known) seen_.push_back({graph.impl(), program});
  entries_.push_front(Entry{graph, program, signature, exe});
  while (entries_.size() > capacity_) {
    entries_.pop_back();
    ++stats_.evictions;
  }
  return exe;
}

CompileCache::Stats CompileCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

size_t CompileCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

void CompileCache::clear() {
  std::lock_guard lock(mu_);
  entries_.clear();
  seen_.clear();
}

}  // namespace kiln::compiler

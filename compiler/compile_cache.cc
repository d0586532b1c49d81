// The LRU cache of Executables per (graph, outputs, feed signature).
#include "compiler/compile_cache.h"

#include <algorithm>

#include "src/core/tensor_impl.h"

namespace kiln::compiler {

CompileCache::CompileCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

std::shared_ptr<const Executable> CompileCache::get(const Graph& graph,
                                                    const std::vector<Tensor>& outputs,
                                                    const FeedList& feeds,
                                                    const std::vector<Donation>& donations) {
  std::string program = std::string("n") + std::to_string(graph.num_nodes()) + ":";
  for (const Tensor& t : outputs) {
    if (!t.defined() || !t.is_symbolic() || t.impl()->graph != graph.impl()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CompileCache: an output is not a value of graph '" + graph.name() + "'");
    }
    program += std::to_string(t.impl()->node) + "." + std::to_string(t.impl()->output) + ",";
  }
  for (const Donation& d : donations) {
    if (!d.feed.defined() || !d.feed.is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CompileCache: a donation's feed is not a placeholder");
    }
    program += "d" + std::to_string(d.feed.impl()->node) + ">" + std::to_string(d.output) + ",";
  }
  std::vector<std::string> parts;
  for (const auto& [key, value] : feeds) {
    if (!key.defined() || !key.is_symbolic() || !value.defined()) {
      throw Error(ErrorCode::kInvalidArgument, "CompileCache: a feed key is not a placeholder");
    }
    parts.push_back(std::to_string(key.impl()->node) + "=" +
                    TensorType{value.dtype(), value.shape()}.str());
  }
  std::sort(parts.begin(), parts.end());
  std::string signature;
  for (const std::string& p : parts) signature += p + ";";

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
  auto exe = std::make_shared<const Executable>(compile(graph, outputs, feeds, donations));
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

// Dividing a dataset between the workers of a multi-worker strategy (tf.data's auto-sharding):
// by file, remaking the pipeline over each worker's files with its part of the batch, or by
// element, each worker keeping its part of every batch.
#include <memory>
#include <utility>

#include "kiln/ops.h"
#include "src/api/data/dataset_node.h"

namespace kiln::data {

const char* auto_shard_policy_name(AutoShardPolicy policy) {
  switch (policy) {
    case AutoShardPolicy::kAuto:
      return "AUTO";
    case AutoShardPolicy::kFile:
      return "FILE";
    case AutoShardPolicy::kData:
      return "DATA";
    case AutoShardPolicy::kOff:
      return "OFF";
  }
  return "?";
}

Dataset Dataset::then(Dataset next, Remake remake, int64_t batch) const {
  next.options_ = options_;
  if (recipe_) {
    auto recipe = std::make_shared<detail::Recipe>(*recipe_);
    recipe->steps.push_back({std::move(remake), batch});
    next.recipe_ = std::move(recipe);
  }
  return next;
}

Dataset Dataset::made_from(std::vector<std::string> files,
                           std::function<Dataset(std::vector<std::string>)> remake) && {
  recipe_ =
      std::make_shared<detail::Recipe>(detail::Recipe{std::move(files), std::move(remake), {}});
  return std::move(*this);
}

Dataset Dataset::with_options(Options options) const {
  Dataset d = *this;
  d.options_ = options;
  return d;
}

namespace {

// Worker w of n's rows of a batch of `rows`: [rows*w/n, rows*(w+1)/n), consecutive, the parts'
// sizes differing by one at most (as fit splits a global batch between replicas).
std::pair<int64_t, int64_t> worker_part(int64_t rows, int64_t w, int64_t n) {
  return {rows * w / n, rows * (w + 1) / n};
}

// The last batching transformation of the recipe, or -1.
int64_t last_batch(const detail::Recipe& recipe) {
  for (int64_t i = static_cast<int64_t>(recipe.steps.size()) - 1; i >= 0; --i)
    if (recipe.steps[i].batch > 0) return i;
  return -1;
}

// Why kFile cannot divide the dataset between `workers`, or "" when it can.
std::string why_not_by_file(const detail::Recipe* recipe, int64_t workers) {
  if (!recipe) return "it is not read from a list of files (tfrecord, text_lines or csv)";
  const auto files = static_cast<int64_t>(recipe->files.size());
  if (files < workers) {
    return "it reads " + std::to_string(files) + " file" + (files == 1 ? "" : "s") + " for " +
           std::to_string(workers) + " workers, and each worker needs one at least";
  }
  if (last_batch(*recipe) < 0) return "it has no batch() to divide between the workers";
  return "";
}

}  // namespace

WorkerShard Dataset::shard_for_worker(int64_t num_workers, int64_t index) const {
  if (num_workers < 1 || index < 0 || index >= num_workers) {
    detail::invalid(
        "Dataset.shard_for_worker: need num_workers >= 1 and 0 <= index < "
        "num_workers, got " +
        std::to_string(num_workers) + " workers and index " + std::to_string(index));
  }
  AutoShardPolicy policy = options_.distribute.auto_shard_policy;
  const std::string workers = std::to_string(num_workers) + " workers";
  if (num_workers == 1 || policy == AutoShardPolicy::kOff) {
    return {*this, AutoShardPolicy::kOff,
            num_workers == 1 ? "one worker reads it all" : "the policy is OFF"};
  }
  std::string reason;
  const std::string not_by_file = why_not_by_file(recipe_.get(), num_workers);
  if (policy == AutoShardPolicy::kFile && !not_by_file.empty()) {
    detail::invalid("Dataset: auto_shard_policy FILE cannot divide the dataset between " + workers +
                    ": " + not_by_file +
                    " (use AutoShardPolicy::kAuto or kData to divide it by element)");
  }
  if (policy == AutoShardPolicy::kAuto) {
    policy = not_by_file.empty() ? AutoShardPolicy::kFile : AutoShardPolicy::kData;
    reason = not_by_file.empty() ? "" : "not by file: " + not_by_file;
  }

  if (policy == AutoShardPolicy::kData) {
    Dataset mine = map([index, num_workers](Element e) {
      for (Tensor& t : e) {
        if (t.rank() == 0) {
          detail::invalid(
              "Dataset: auto-sharding by element (DATA) takes each worker's rows of "
              "every batch, but an element has a scalar component: batch the "
              "dataset first");
        }
        auto [begin, end] = worker_part(t.dim(0), index, num_workers);
        std::vector<int64_t> from(t.rank(), 0), to(t.shape().begin(), t.shape().end());
        from[0] = begin, to[0] = end;
        t = slice(t, from, to);
      }
      return e;
    });
    return {std::move(mine), AutoShardPolicy::kData,
            "by element: each of the " + workers + " reads every batch and keeps its part" +
                (reason.empty() ? "" : "; " + reason)};
  }

  // kFile: the source over files index, index + n, ..., every step again, the last batch at
  // this worker's part of it.
  const detail::Recipe& recipe = *recipe_;
  std::vector<std::string> files;
  for (size_t f = static_cast<size_t>(index); f < recipe.files.size();
       f += static_cast<size_t>(num_workers))
    files.push_back(recipe.files[f]);
  const int64_t at = last_batch(recipe), global = recipe.steps[at].batch;
  auto [begin, end] = worker_part(global, index, num_workers);
  if (end == begin) {
    detail::invalid("Dataset: auto-sharding by file divides each batch of " +
                    std::to_string(global) + " between the " + workers + ", which leaves worker " +
                    std::to_string(index) +
                    " no rows: batch at least as many elements as there are workers");
  }
  Dataset mine = recipe.source(files);
  for (int64_t i = 0; i < static_cast<int64_t>(recipe.steps.size()); ++i) {
    mine = recipe.steps[i].remake(mine, i == at ? end - begin : recipe.steps[i].batch);
  }
  return {mine.with_options(options_), AutoShardPolicy::kFile,
          "by file: worker " + std::to_string(index) + " of " + std::to_string(num_workers) +
              " reads " + std::to_string(files.size()) + " of the " +
              std::to_string(recipe.files.size()) + " files, in batches of " +
              std::to_string(end - begin) + " (its part of " + std::to_string(global) + ")"};
}

}  // namespace kiln::data

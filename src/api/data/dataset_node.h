// The inside of kiln::data::Dataset: a pipeline is a chain of immutable nodes, each of which
// makes iterators for an epoch. Shared by the dataset*.cc files.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/error.h"

namespace kiln::data::detail {

using NodePtr = std::shared_ptr<const DatasetNode>;

class DatasetNode;

// One epoch's walk over a node. After next() throws, it is not called again.
class IteratorImpl {
 public:
  virtual ~IteratorImpl() = default;
  virtual std::optional<Element> next() = 0;
  // The node whose rows this iterator's elements are, when each element is element_at(i) of a
  // node that gathers rows (DatasetNode::gathers_rows: an in-memory source, read in order or
  // through shuffle's index buffer); null otherwise. Then next_indices(n, out) replaces n calls
  // of next(): it appends the indices of the next elements, n or fewer at the end, and batch
  // gathers the rows straight into the batch instead of making each element.
  virtual const DatasetNode* row_source() const { return nullptr; }
  virtual void next_indices(int64_t n, std::vector<int64_t>& out) { (void)n, (void)out; }
};

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const = 0;
  virtual int64_t cardinality() const = 0;
  // What the node yields, in words stable from run to run (parameters, file names with sizes
  // and modification times, hashes of tensor data): equal descriptions mean equal elements,
  // up to map and filter functions, which it cannot see. The fingerprint of a cache file.
  virtual std::string describe() const = 0;
  // Whether making its elements may wait for threads of the pipeline's own (a parallel map or
  // a prefetch, here or upstream): such a pipeline is not read by the compute pool's workers.
  virtual bool waits_on_threads() const { return false; }
  // Whether element_at(i) gives the i-th element of every epoch directly (an in-memory
  // source), so that shuffle can keep indices in its buffer instead of elements.
  virtual bool random_access() const { return false; }
  virtual Element element_at(int64_t index) const;
  // Whether gather_rows is implemented: the elements at `indices`, each component stacked along
  // a new dimension 0, as batch would stack them (a random-access node whose elements all
  // share their components' dtypes and shapes).
  virtual bool gathers_rows() const { return false; }
  virtual Element gather_rows(const std::vector<int64_t>& indices) const;
};

// How a dataset read from a list of files was made (Dataset's recipe): its source over other
// files, then each transformation over another upstream. kFile auto-sharding makes it again over
// a worker's own files with its part of the batch (dataset_shard.cc).
struct Recipe {
  std::vector<std::string> files;
  std::function<Dataset(std::vector<std::string>)> source;
  struct Step {
    std::function<Dataset(const Dataset&, int64_t batch)> remake;
    int64_t batch = 0;  // > 0: a batching transformation of this size
  };
  std::vector<Step> steps;
};

[[noreturn]] inline void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

// A 64-bit hash of bytes (not cryptographic), for fingerprints.
uint64_t hash_bytes(const void* data, size_t n, uint64_t seed = 0);
std::string hex64(uint64_t v);
// "path:size:mtime", or "path:missing": a file's identity in a description.
std::string describe_file(const std::string& path);

// Nodes built in the other files.
NodePtr make_parallel_map_node(NodePtr input, Dataset::MapFn fn, int64_t threads,
                               bool deterministic);
NodePtr make_prefetch_node(NodePtr input, int64_t buffer_size);
NodePtr make_memory_cache_node(NodePtr input);
NodePtr make_file_cache_node(NodePtr input, std::string filename);
NodePtr make_batch_node(NodePtr input, int64_t n, bool drop_remainder);
NodePtr make_described_node(NodePtr inner, NodePtr input, std::string suffix);
NodePtr make_ragged_batch_node(NodePtr input, int64_t n, bool drop_remainder);
NodePtr make_padded_batch_node(NodePtr input, int64_t n, std::vector<Shape> padded_shapes,
                               std::vector<double> padding_values, bool drop_remainder);

}  // namespace kiln::data::detail

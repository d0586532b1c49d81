// kiln::data::Dataset: input pipelines in the manner of tf.data. Sources (tensors, IDX,
// TFRecord, text and CSV files) chained with transformations (map, filter, shuffle, batch,
// prefetch, cache, ...), iterated one epoch at a time by a pull-based Iterator.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/io/example.h"
#include "kiln/io/tfrecord.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"

namespace kiln::data {

// One element of a dataset: its components, e.g. {image, label}.
using Element = std::vector<Tensor>;

// For map's num_parallel_calls (the number of cores) and prefetch's buffer size (2).
inline constexpr int64_t kAutotune = -1;
// Dataset::cardinality() values.
inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;

namespace detail {
class DatasetNode;
class IteratorImpl;
struct Recipe;
}  // namespace detail

// How Model::fit under a multi-worker strategy divides a dataset between the workers: tf.data's
// AutoShardPolicy, set as TF users set it (options.distribute.auto_shard_policy, with_options).
// The dataset is written as for one process, batched at the global batch B.
enum class AutoShardPolicy {
  // kFile when the pipeline reads a list of files (tfrecord, text_lines, csv) holding at least
  // one file per worker and batches them; kData otherwise.
  kAuto,
  // Worker w of n reads files w, w + n, w + 2n, ... of the source's list, and the pipeline's
  // last batch(B) (or ragged_batch, padded_batch) becomes worker w's part of B (B/n, the parts
  // differing by one row at most), so a step's global batch is still B. Fewer files than
  // workers, no file source or no batch is a kiln::Error. Each worker must then end up with the
  // same number of batches per epoch (a worker that runs out first leaves the others waiting in
  // the step's all-reduce until the collective deadline fails them).
  kFile,
  // Every worker reads every element; worker w keeps its consecutive part of each batch
  // (element components sliced along dimension 0; a batch shorter than the workers leaves some
  // without rows). Equal data everywhere, equal step counts. (fit does this inside the step: it
  // reads the global batches on every worker and gives a worker without rows a stand-in row
  // weighted by zero.)
  kData,
  // Not divided: every worker trains on each element as its own part of the step (the program
  // divides the input itself, e.g. a file list per worker batched at the per-worker size).
  kOff,
};
const char* auto_shard_policy_name(AutoShardPolicy policy);  // "AUTO", "FILE", "DATA", "OFF"

struct DistributeOptions {
  AutoShardPolicy auto_shard_policy = AutoShardPolicy::kAuto;
};
// A dataset's options (tf.data.Options): later transformations keep them.
struct Options {
  DistributeOptions distribute;
};

class Dataset;
// What Dataset::shard_for_worker chose: the worker's dataset and the policy applied (kFile,
// kData or kOff, never kAuto), with why in words.
struct WorkerShard;

// Walks one epoch of a dataset. Pipelines with map(num_parallel_calls > 1) or prefetch run
// background threads, which the iterator owns: destroying it (at any point, mid-epoch
// included) stops and joins them. An exception thrown by next() (from a source, a map or
// filter function, a batch of mismatched shapes, ...) arrives at the position of the element
// that caused it, after every element before it, and ends the epoch: later calls return
// std::nullopt. Movable; one iterator must not be used by two threads at once.
class Iterator {
 public:
  Iterator();  // at the end already
  explicit Iterator(std::unique_ptr<detail::IteratorImpl> impl);
  ~Iterator();
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;

  // The next element, or std::nullopt at the end of the epoch.
  std::optional<Element> next();

 private:
  std::unique_ptr<detail::IteratorImpl> impl_;
  bool done_ = false;
};

// TFRecord files read at once: `cycle_length` files are open, and `block_length` records are
// taken from each in turn, as tf.data's interleave does (cycle_length 1 reads the files one
// after the other). When a file ends, the next file of the list takes its place in the cycle.
struct Interleave {
  int64_t cycle_length = 1;
  int64_t block_length = 1;
};

// One column of a CSV file: its type (f32, i64 or i32), an optional name for messages, and
// the value of an empty field (without one, an empty field is an error).
struct CsvColumn {
  DType dtype = f32;
  std::optional<double> default_value;
  std::string name;
};

struct CsvOptions {
  std::vector<CsvColumn> columns;  // every line must have exactly this many fields
  bool header = false;             // skip the first line of each file
  char delimiter = ',';
};

// A dataset: a cheap, immutable value (a shared pointer to a node of the pipeline); each
// transformation returns a new Dataset and leaves this one as it is. Everything is
// deterministic: the same pipeline (same seeds) yields the same elements in the same order for
// the same epoch number, whatever the number of threads (except map with deterministic=false).
// Errors in arguments throw kiln::Error kInvalidArgument at once; errors in data (a missing or
// corrupt file, a malformed CSV field, mismatched shapes) throw from Iterator::next().
class Dataset {
 public:
  // ---- sources ----
  Dataset();  // no elements
  // Slices of the tensors along dimension 0: element i is {tensors[0][i], tensors[1][i], ...}.
  // The tensors must be concrete, of rank >= 1 and have the same size in dimension 0.
  static Dataset from_tensors(std::vector<Tensor> tensors);
  // {image, label} pairs from two IDX files (see read_idx), read now; they must hold the same
  // number of items.
  static Dataset from_idx(const std::string& images_path, const std::string& labels_path);
  // The records of TFRecord files, each element {u8 [n]: the record's bytes}.
  static Dataset tfrecord(std::vector<std::string> files,
                          io::Compression compression = io::Compression::kNone,
                          Interleave interleave = {});
  // The lines of text files, one file after the other: each element {u8 [n]: the line's
  // bytes without its "\n" or "\r\n"}. A last line without a newline counts.
  static Dataset text_lines(std::vector<std::string> files);
  // The lines of CSV files, one file after the other: each element one scalar tensor per
  // column. Fields are numbers (spaces around them allowed); blank lines are skipped. A
  // malformed field or a line with the wrong number of fields throws kInvalidArgument naming
  // the file, the line and the column.
  static Dataset csv(std::vector<std::string> files, CsvOptions options);

  // ---- transformations ----
  using MapFn = std::function<Element(Element)>;
  using Predicate = std::function<bool(const Element&)>;

  // fn applied to each element. num_parallel_calls 1 calls fn on the consumer's thread;
  // N > 1 (or kAutotune: the number of cores) calls it on a pool of N threads of this map's
  // own (not the kernels' pool), a few elements ahead of the consumer. The order of elements
  // is kept, unless deterministic is false: then an element is delivered as soon as it is
  // ready. fn must be safe to call from several threads at once when N > 1.
  Dataset map(MapFn fn, int64_t num_parallel_calls = 1, bool deterministic = true) const;
  // The elements for which pred is true.
  Dataset filter(Predicate pred) const;
  // tf.data's shuffle: a buffer of buffer_size elements, from which a random one is taken and
  // replaced by the next element. The order depends only on (seed, epoch) with
  // reshuffle_each_iteration, on seed alone otherwise.
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;
  // Groups of n elements, each component stacked along a new dimension 0. Components of the
  // elements of a batch must have equal dtypes and shapes (else kInvalidArgument at next()).
  // The last batch may be smaller, unless drop_remainder.
  Dataset batch(int64_t n, bool drop_remainder = false) const;
  // Like batch, for components whose shapes differ in size (not rank): component c is padded
  // at the end of each dimension to padded_shapes[c] (a kUnknownDim there, or no
  // padded_shapes at all: to the largest in the batch), with padding_values[c] (default 0).
  Dataset padded_batch(int64_t n, std::vector<Shape> padded_shapes = {},
                       std::vector<double> padding_values = {}, bool drop_remainder = false) const;
  // Groups of n elements whose components differ in their first dimension, such as TFRecord
  // records (u8 [bytes]): each component c becomes two, a RaggedTensor's encoding: its values
  // concatenated along dimension 0 (component 2c) and row_splits (2c + 1, i64 [k + 1]: element
  // i's rows are values[row_splits[i] : row_splits[i + 1]]). Components must have rank >= 1,
  // and equal dtypes and other dimensions (else kInvalidArgument at next()). The last group
  // may be smaller, unless drop_remainder. This is how records are batched before parsing
  // them all at once, as tf.data users batch tf.string records before tf.io.parse_example.
  Dataset ragged_batch(int64_t n, bool drop_remainder = false) const;
  // Parses batches of serialized tf.Examples, as ragged_batch makes them from records
  // ({values u8, row_splits i64}), with io::parse_example: each element becomes the spec's
  // features in spec order, batched: a FixedLen feature one tensor [k, shape...], a VarLen
  // feature two, its padded values [k, max_len] and its lengths [k]. It is a map (see map for
  // num_parallel_calls and deterministic); an error names the record's index in its batch and
  // (where the bytes allow) the feature. Like tf.data's parse_example_dataset.
  Dataset parse_example(std::vector<io::FeatureSpec> spec, int64_t num_parallel_calls = 1,
                        bool deterministic = true) const;
  // A background thread keeps up to buffer_size elements ready (kAutotune: 2).
  Dataset prefetch(int64_t buffer_size = kAutotune) const;
  // prefetch, the background thread also copying each element's tensors to `device`
  // (Tensor::to): the next batches wait on the GPU while a step runs, and a program compiled
  // for that device reads them there (tf.data.experimental.prefetch_to_device). The last
  // transformation of a pipeline, as in TensorFlow: the elements are device tensors, which
  // host functions cannot read. cpu:0 is plain prefetch. Throws kiln::Error now for a device
  // this machine lacks (as Tensor::to would for each element).
  Dataset prefetch_to_device(const Device& device, int64_t buffer_size = kAutotune) const;
  // Keeps the elements of the first complete epoch in memory; later epochs read them from
  // there (an epoch stopped early keeps nothing).
  Dataset cache() const;
  // Keeps the elements in a file. The first complete epoch writes `filename` (TFRecord-framed
  // serialized tensors after a header holding a fingerprint of the upstream pipeline) through
  // a temporary file renamed into place only once the epoch is complete; later epochs, and
  // later runs of the program, read the file instead of the upstream pipeline. A file whose
  // fingerprint differs (another pipeline: other sources, files, parameters) or that is corrupt
  // is rebuilt. The fingerprint cannot see inside map/filter functions: delete the file when
  // one of them changes.
  Dataset cache(const std::string& filename) const;
  // The dataset `count` times (-1: forever). Each repetition is a new epoch of the upstream
  // (a shuffle upstream reshuffles). A repetition that yields nothing ends the repeat.
  Dataset repeat(int64_t count = -1) const;
  // The first n elements (n = -1: all).
  Dataset take(int64_t n) const;
  // All but the first n elements (n = -1: none).
  Dataset skip(int64_t n) const;
  // Elements index, index + num_shards, index + 2 * num_shards, ...
  Dataset shard(int64_t num_shards, int64_t index) const;

  // ---- distribution ----
  // This dataset with `options`, which the transformations applied after it keep.
  Dataset with_options(Options options) const;
  const Options& options() const { return options_; }
  // The dataset that worker `index` of `num_workers` trains on, as options().distribute's
  // auto_shard_policy divides it (see AutoShardPolicy): what Model::fit does under a strategy of
  // several worker processes. kInvalidArgument for a policy that cannot apply (kFile with fewer
  // files than workers, no file source or no batch) or bad numbers.
  WorkerShard shard_for_worker(int64_t num_workers, int64_t index) const;

  // ---- iteration ----
  Iterator begin_epoch(int64_t epoch = 0) const;
  // The number of elements of an epoch when cheap to know: kInfiniteCardinality for a repeat
  // forever, kUnknownCardinality after a filter or for file sources.
  int64_t cardinality() const;

  // Internal.
  explicit Dataset(std::shared_ptr<const detail::DatasetNode> node);
  const std::shared_ptr<const detail::DatasetNode>& node() const { return node_; }

 private:
  // How each transformation is made again over another upstream (the same arguments; `batch` is
  // the batch size, for the batching ones), kept so that kFile sharding can remake the pipeline
  // over a worker's own files with its part of the batch.
  using Remake = std::function<Dataset(const Dataset& upstream, int64_t batch)>;
  // `next` (made from this dataset) with this dataset's options and recipe plus `remake`.
  Dataset then(Dataset next, Remake remake, int64_t batch = 0) const;
  // This file source, remade over other files by `remake`.
  Dataset made_from(std::vector<std::string> files,
                    std::function<Dataset(std::vector<std::string>)> remake) &&;

  std::shared_ptr<const detail::DatasetNode> node_;
  std::shared_ptr<const detail::Recipe> recipe_;  // null: not made from a file source
  Options options_;
};

struct WorkerShard {
  Dataset dataset;
  AutoShardPolicy policy;
  std::string reason;
};

}  // namespace kiln::data

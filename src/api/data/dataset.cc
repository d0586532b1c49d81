// Dataset and Iterator, and the transformations that need no threads or buffers of their own:
// sequential map, filter, shuffle, repeat, take, skip, shard.
#include "kiln/data/dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "compiler/executable.h"
#include "src/api/data/dataset_node.h"

namespace kiln::data {
namespace detail {

uint64_t hash_bytes(const void* data, size_t n, uint64_t seed) {
  // Eight bytes at a time, each word mixed in with a multiply and a rotate.
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = seed ^ (n * kMul);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  if (i < n) std::memcpy(&tail, p + i, n - i);
  h = (h ^ tail) * kMul;
  return h ^ (h >> 32);
}

std::string hex64(uint64_t v) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = kDigits[v & 15];
  return s;
}

std::string describe_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return path + ":missing";
  return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

Element DatasetNode::element_at(int64_t) const {
  throw Error(ErrorCode::kInternal,
              "Dataset: element_at on a node without random access (" + describe() + ")");
}

Element DatasetNode::gather_rows(const std::vector<int64_t>&) const {
  throw Error(ErrorCode::kInternal,
              "Dataset: gather_rows on a node that does not gather rows (" + describe() + ")");
}

namespace {

class EmptyNode : public DatasetNode {
 public:
  std::unique_ptr<IteratorImpl> make_iterator(int64_t) const override {
    struct It : IteratorImpl {
      std::optional<Element> next() override { return std::nullopt; }
    };
    return std::make_unique<It>();
  }
  int64_t cardinality() const override { return 0; }
  std::string describe() const override { return "empty()"; }
};

// ---- map (on the consumer's thread) and filter ----

class MapNode : public DatasetNode {
 public:
  MapNode(NodePtr input, Dataset::MapFn fn) : input_(std::move(input)), fn_(std::move(fn)) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      std::unique_ptr<IteratorImpl> input;
      Dataset::MapFn fn;
      std::optional<Element> next() override {
        std::optional<Element> e = input->next();
        if (!e) return e;
        return fn(std::move(*e));
      }
    };
    auto it = std::make_unique<It>();
    it->input = input_->make_iterator(epoch);
    it->fn = fn_;
    return it;
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  std::string describe() const override { return input_->describe() + ".map()"; }

 private:
  NodePtr input_;
  Dataset::MapFn fn_;
};

// A node that behaves as `inner` and describes itself as its input's description + suffix:
// for transformations built from a map, whose function the description cannot otherwise see.
class DescribedNode : public DatasetNode {
 public:
  DescribedNode(NodePtr inner, NodePtr input, std::string suffix)
      : inner_(std::move(inner)), input_(std::move(input)), suffix_(std::move(suffix)) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    return inner_->make_iterator(epoch);
  }
  int64_t cardinality() const override { return inner_->cardinality(); }
  bool waits_on_threads() const override { return inner_->waits_on_threads(); }
  std::string describe() const override { return input_->describe() + suffix_; }

 private:
  NodePtr inner_, input_;
  std::string suffix_;
};

class FilterNode : public DatasetNode {
 public:
  FilterNode(NodePtr input, Dataset::Predicate pred)
      : input_(std::move(input)), pred_(std::move(pred)) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      std::unique_ptr<IteratorImpl> input;
      Dataset::Predicate pred;
      std::optional<Element> next() override {
        while (std::optional<Element> e = input->next()) {
          if (pred(*e)) return e;
        }
        return std::nullopt;
      }
    };
    auto it = std::make_unique<It>();
    it->input = input_->make_iterator(epoch);
    it->pred = pred_;
    return it;
  }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  int64_t cardinality() const override {
    return input_->cardinality() == kInfiniteCardinality ? kInfiniteCardinality
                                                         : kUnknownCardinality;
  }
  std::string describe() const override { return input_->describe() + ".filter()"; }

 private:
  NodePtr input_;
  Dataset::Predicate pred_;
};

// ---- shuffle ----

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The buffer algorithm of tf.data's shuffle, over items of type T read by `read` (nullopt at
// the end): keep the buffer full, hand out a random slot, and fill the slot with the next item
// (or, once the input has ended, with the last slot).
template <class T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(size_t capacity, uint64_t seed) : capacity_(capacity), rng_(seed) {
    buffer_.reserve(std::min<size_t>(capacity, size_t{1} << 16));  // no regrowth copies
  }
  template <class Read>
  std::optional<T> next(Read&& read) {
    while (!input_done_ && buffer_.size() < capacity_) {
      std::optional<T> item = read();
      if (!item) {
        input_done_ = true;
        break;
      }
      buffer_.push_back(std::move(*item));
    }
    if (buffer_.empty()) return std::nullopt;
    // Multiply-shift maps a 64-bit draw onto [0, size) the same way on every platform.
    auto slot =
        static_cast<size_t>((static_cast<unsigned __int128>(rng_()) * buffer_.size()) >> 64);
    T out = std::move(buffer_[slot]);
    std::optional<T> refill;
    if (!input_done_) {
      refill = read();
      if (!refill) input_done_ = true;
    }
    if (refill) {
      buffer_[slot] = std::move(*refill);
    } else {
      buffer_[slot] = std::move(buffer_.back());
      buffer_.pop_back();
    }
    return out;
  }

 private:
  size_t capacity_;
  std::mt19937_64 rng_;
  std::vector<T> buffer_;
  bool input_done_ = false;
};

class ShuffleNode : public DatasetNode {
 public:
  ShuffleNode(NodePtr input, int64_t buffer_size, uint64_t seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {}

  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    uint64_t epoch_key = reshuffle_ ? static_cast<uint64_t>(epoch) : 0;
    const uint64_t seed = splitmix64(seed_ ^ splitmix64(epoch_key ^ 0x5348554646ull));
    const auto capacity = static_cast<size_t>(buffer_size_);
    if (input_->random_access()) {
      // An in-memory source: the buffer holds indices, and only the elements handed out are
      // made (filling a buffer as large as the data made every element before the first).
      struct Indices : IteratorImpl {
        NodePtr input;
        int64_t size = 0, next_index = 0;
        ShuffleBuffer<int64_t> buffer;
        Indices(NodePtr in, size_t capacity, uint64_t seed)
            : input(std::move(in)), size(input->cardinality()), buffer(capacity, seed) {}
        std::optional<int64_t> next_row() {
          return buffer.next([&]() -> std::optional<int64_t> {
            if (next_index == size) return std::nullopt;
            return next_index++;
          });
        }
        std::optional<Element> next() override {
          std::optional<int64_t> i = next_row();
          if (!i) return std::nullopt;
          return input->element_at(*i);
        }
        const DatasetNode* row_source() const override {
          return input->gathers_rows() ? input.get() : nullptr;
        }
        void next_indices(int64_t n, std::vector<int64_t>& out) override {
          for (int64_t k = 0; k < n; ++k) {
            std::optional<int64_t> i = next_row();
            if (!i) return;
            out.push_back(*i);
          }
        }
      };
      return std::make_unique<Indices>(input_, capacity, seed);
    }
    struct Elements : IteratorImpl {
      std::unique_ptr<IteratorImpl> input;
      ShuffleBuffer<Element> buffer;
      Elements(std::unique_ptr<IteratorImpl> in, size_t capacity, uint64_t seed)
          : input(std::move(in)), buffer(capacity, seed) {}
      std::optional<Element> next() override {
        return buffer.next([&] { return input->next(); });
      }
    };
    return std::make_unique<Elements>(input_->make_iterator(epoch), capacity, seed);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  std::string describe() const override {
    return input_->describe() + ".shuffle(" + std::to_string(buffer_size_) + "," +
           std::to_string(seed_) + "," + (reshuffle_ ? "true" : "false") + ")";
  }

 private:
  NodePtr input_;
  int64_t buffer_size_;
  uint64_t seed_;
  bool reshuffle_;
};

// ---- repeat, take, skip, shard ----

class RepeatNode : public DatasetNode {
 public:
  RepeatNode(NodePtr input, int64_t count) : input_(std::move(input)), count_(count) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      NodePtr node;
      int64_t count = 0;  // -1: forever
      int64_t epoch = 0;
      int64_t repetition = 0;
      bool yielded = false;  // in this repetition
      std::unique_ptr<IteratorImpl> input;
      std::optional<Element> next() override {
        while (count < 0 || repetition < count) {
          if (!input) {
            // Repetition r of epoch e is upstream epoch e * count + r: distinct for every
            // (epoch, repetition), and the plain sequence 0, 1, 2, ... for epoch 0.
            uint64_t stride = count < 0 ? (uint64_t{1} << 32) : static_cast<uint64_t>(count);
            auto upstream_epoch = static_cast<int64_t>(static_cast<uint64_t>(epoch) * stride +
                                                       static_cast<uint64_t>(repetition));
            input = node->make_iterator(upstream_epoch);
            yielded = false;
          }
          if (std::optional<Element> e = input->next()) {
            yielded = true;
            return e;
          }
          input.reset();
          ++repetition;
          if (!yielded) break;  // an empty input would repeat nothing forever
        }
        return std::nullopt;
      }
    };
    auto it = std::make_unique<It>();
    it->node = input_;
    it->count = count_;
    it->epoch = epoch;
    return it;
  }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c == 0 || count_ == 0) return 0;
    if (count_ < 0 || c == kInfiniteCardinality) return kInfiniteCardinality;
    if (c == kUnknownCardinality) return kUnknownCardinality;
    return c * count_;
  }
  std::string describe() const override {
    return input_->describe() + ".repeat(" + std::to_string(count_) + ")";
  }

 private:
  NodePtr input_;
  int64_t count_;
};

class TakeNode : public DatasetNode {
 public:
  TakeNode(NodePtr input, int64_t n) : input_(std::move(input)), n_(n) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      std::unique_ptr<IteratorImpl> input;
      int64_t left = 0;
      std::optional<Element> next() override {
        if (left == 0) return std::nullopt;
        std::optional<Element> e = input->next();
        if (!e) {
          left = 0;
          return e;
        }
        --left;
        if (left == 0) input.reset();  // stop upstream threads early
        return e;
      }
    };
    auto it = std::make_unique<It>();
    it->left = n_;
    if (n_ != 0) it->input = input_->make_iterator(epoch);
    return it;
  }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c == kInfiniteCardinality) return n_;
    if (c == kUnknownCardinality) return kUnknownCardinality;
    return std::min(c, n_);
  }
  std::string describe() const override {
    return input_->describe() + ".take(" + std::to_string(n_) + ")";
  }

 private:
  NodePtr input_;
  int64_t n_;
};

class SkipNode : public DatasetNode {
 public:
  SkipNode(NodePtr input, int64_t n) : input_(std::move(input)), n_(n) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      std::unique_ptr<IteratorImpl> input;
      int64_t to_skip = 0;
      std::optional<Element> next() override {
        for (; to_skip > 0; --to_skip) {
          if (!input->next()) {
            to_skip = 0;
            return std::nullopt;
          }
        }
        return input->next();
      }
    };
    auto it = std::make_unique<It>();
    it->input = input_->make_iterator(epoch);
    it->to_skip = n_;
    return it;
  }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c < 0) return c;
    return std::max<int64_t>(0, c - n_);
  }
  std::string describe() const override {
    return input_->describe() + ".skip(" + std::to_string(n_) + ")";
  }

 private:
  NodePtr input_;
  int64_t n_;
};

class ShardNode : public DatasetNode {
 public:
  ShardNode(NodePtr input, int64_t num_shards, int64_t index)
      : input_(std::move(input)), num_shards_(num_shards), index_(index) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      std::unique_ptr<IteratorImpl> input;
      int64_t num_shards = 1;
      int64_t index = 0;
      int64_t position = 0;  // of the next upstream element
      std::optional<Element> next() override {
        while (std::optional<Element> e = input->next()) {
          if (position++ % num_shards == index) return e;
        }
        return std::nullopt;
      }
    };
    auto it = std::make_unique<It>();
    it->input = input_->make_iterator(epoch);
    it->num_shards = num_shards_;
    it->index = index_;
    return it;
  }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  int64_t cardinality() const override {
    int64_t c = input_->cardinality();
    if (c < 0) return c;
    return c <= index_ ? 0 : (c - index_ + num_shards_ - 1) / num_shards_;
  }
  std::string describe() const override {
    return input_->describe() + ".shard(" + std::to_string(num_shards_) + "," +
           std::to_string(index_) + ")";
  }

 private:
  NodePtr input_;
  int64_t num_shards_;
  int64_t index_;
};

}  // namespace

NodePtr make_described_node(NodePtr inner, NodePtr input, std::string suffix) {
  return std::make_shared<DescribedNode>(std::move(inner), std::move(input), std::move(suffix));
}

}  // namespace detail

// ---- Iterator ----

Iterator::Iterator() : done_(true) {}
Iterator::Iterator(std::unique_ptr<detail::IteratorImpl> impl) : impl_(std::move(impl)) {}
Iterator::~Iterator() = default;
Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&&) noexcept = default;

std::optional<Element> Iterator::next() {
  if (done_ || !impl_) return std::nullopt;
  try {
    std::optional<Element> e = impl_->next();
    if (!e) {
      done_ = true;
      impl_.reset();  // joins background threads now rather than at destruction
    }
    return e;
  } catch (...) {
    done_ = true;
    impl_.reset();
    throw;
  }
}

// ---- Dataset ----

Dataset::Dataset() : node_(std::make_shared<detail::EmptyNode>()) {}
Dataset::Dataset(std::shared_ptr<const detail::DatasetNode> node) : node_(std::move(node)) {
  if (!node_) detail::invalid("Dataset: null node");
}

Iterator Dataset::begin_epoch(int64_t epoch) const { return Iterator(node_->make_iterator(epoch)); }

int64_t Dataset::cardinality() const { return node_->cardinality(); }

Dataset Dataset::map(MapFn fn, int64_t num_parallel_calls, bool deterministic) const {
  if (!fn) detail::invalid("Dataset.map: the function is empty");
  if (num_parallel_calls == kAutotune) {
    num_parallel_calls = std::max<int64_t>(1, std::thread::hardware_concurrency());
  }
  if (num_parallel_calls < 1) {
    detail::invalid("Dataset.map: num_parallel_calls must be at least 1 or kAutotune (-1), not " +
                    std::to_string(num_parallel_calls));
  }
  Remake remake = [fn, num_parallel_calls, deterministic](const Dataset& d, int64_t) {
    return d.map(fn, num_parallel_calls, deterministic);
  };
  if (num_parallel_calls == 1) {
    return then(Dataset(std::make_shared<detail::MapNode>(node_, std::move(fn))), remake);
  }
  return then(Dataset(detail::make_parallel_map_node(node_, std::move(fn), num_parallel_calls,
                                                     deterministic)),
              remake);
}

Dataset Dataset::filter(Predicate pred) const {
  if (!pred) detail::invalid("Dataset.filter: the predicate is empty");
  Remake remake = [pred](const Dataset& d, int64_t) { return d.filter(pred); };
  return then(Dataset(std::make_shared<detail::FilterNode>(node_, std::move(pred))), remake);
}

Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  if (buffer_size < 1) {
    detail::invalid("Dataset.shuffle: buffer_size must be at least 1, not " +
                    std::to_string(buffer_size));
  }
  return then(Dataset(std::make_shared<detail::ShuffleNode>(node_, buffer_size, seed,
                                                            reshuffle_each_iteration)),
              [=](const Dataset& d, int64_t) {
                return d.shuffle(buffer_size, seed, reshuffle_each_iteration);
              });
}

Dataset Dataset::batch(int64_t n, bool drop_remainder) const {
  if (n < 1) {
    detail::invalid("Dataset.batch: the batch size must be at least 1, not " + std::to_string(n));
  }
  return then(
      Dataset(detail::make_batch_node(node_, n, drop_remainder)),
      [=](const Dataset& d, int64_t b) { return d.batch(b, drop_remainder); }, n);
}

Dataset Dataset::ragged_batch(int64_t n, bool drop_remainder) const {
  if (n < 1) {
    detail::invalid("Dataset.ragged_batch: the batch size must be at least 1, not " +
                    std::to_string(n));
  }
  return then(
      Dataset(detail::make_ragged_batch_node(node_, n, drop_remainder)),
      [=](const Dataset& d, int64_t b) { return d.ragged_batch(b, drop_remainder); }, n);
}

Dataset Dataset::parse_example(std::vector<io::FeatureSpec> spec, int64_t num_parallel_calls,
                               bool deterministic) const {
  // Check the spec now, on an empty batch, rather than at the first element.
  io::parse_example(std::span<const std::string_view>(), spec);
  Remake remake = [=](const Dataset& d, int64_t) {
    return d.parse_example(spec, num_parallel_calls, deterministic);
  };
  std::string description = ".parse_example(";
  for (const io::FeatureSpec& entry : spec) {
    if (const auto* f = std::get_if<io::FixedLen>(&entry)) {
      description += "fixed:" + f->name + ":" + dtype_name(f->dtype) + shape_str(f->shape) +
                     (f->default_value ? ":default" : "") + ";";
      if (f->default_value) {
        description += detail::hex64(
            detail::hash_bytes(f->default_value->raw_data(), f->default_value->nbytes()));
      }
    } else {
      const auto& v = std::get<io::VarLen>(entry);
      description += "var:" + v.name + ":" + dtype_name(v.dtype) + ";";
    }
  }
  description += ")";
  auto parse = [spec = std::move(spec)](Element e) -> Element {
    if (e.size() != 2) {
      detail::invalid(
          "Dataset.parse_example: an element must be a batch of serialized records as "
          "ragged_batch makes them ({values u8, row_splits i64}), but it has " +
          std::to_string(e.size()) + " components (apply ragged_batch(n) to the records first)");
    }
    std::map<std::string, Tensor> parsed = io::parse_example(e[0], e[1], spec);
    Element out;
    out.reserve(spec.size() * 2);
    for (const io::FeatureSpec& entry : spec) {
      if (const auto* f = std::get_if<io::FixedLen>(&entry)) {
        out.push_back(std::move(parsed.at(f->name)));
      } else {
        const std::string& name = std::get<io::VarLen>(entry).name;
        out.push_back(std::move(parsed.at(name)));
        out.push_back(std::move(parsed.at(io::lengths_key(name))));
      }
    }
    return out;
  };
  Dataset mapped = map(std::move(parse), num_parallel_calls, deterministic);
  return then(Dataset(detail::make_described_node(mapped.node(), node_, std::move(description))),
              remake);
}

Dataset Dataset::padded_batch(int64_t n, std::vector<Shape> padded_shapes,
                              std::vector<double> padding_values, bool drop_remainder) const {
  if (n < 1) {
    detail::invalid("Dataset.padded_batch: the batch size must be at least 1, not " +
                    std::to_string(n));
  }
  for (const Shape& shape : padded_shapes) {
    for (int64_t d : shape) {
      if (d < 0 && d != kUnknownDim) {
        detail::invalid("Dataset.padded_batch: padded shape " + shape_str(shape) +
                        " has a negative dimension (use kUnknownDim to pad to the largest)");
      }
    }
  }
  Remake remake = [=](const Dataset& d, int64_t b) {
    return d.padded_batch(b, padded_shapes, padding_values, drop_remainder);
  };
  return then(Dataset(detail::make_padded_batch_node(node_, n, std::move(padded_shapes),
                                                     std::move(padding_values), drop_remainder)),
              remake, n);
}

Dataset Dataset::prefetch(int64_t buffer_size) const {
  if (buffer_size == kAutotune) buffer_size = 2;
  if (buffer_size < 1) {
    detail::invalid("Dataset.prefetch: buffer_size must be at least 1 or kAutotune (-1), not " +
                    std::to_string(buffer_size));
  }
  return then(Dataset(detail::make_prefetch_node(node_, buffer_size)),
              [=](const Dataset& d, int64_t) { return d.prefetch(buffer_size); });
}

Dataset Dataset::prefetch_to_device(const Device& device, int64_t buffer_size) const {
  if (device == Device::cpu()) return prefetch(buffer_size);
  try {
    compiler::check_device(device);
  } catch (const Error& e) {
    throw Error(e.code(), "Dataset.prefetch_to_device(" + device.str() + "): " + e.what());
  }
  return map([device](Element e) {
           for (Tensor& t : e) t = t.to(device);
           return e;
         })
      .prefetch(buffer_size);
}

Dataset Dataset::cache() const {
  return then(Dataset(detail::make_memory_cache_node(node_)),
              [](const Dataset& d, int64_t) { return d.cache(); });
}

Dataset Dataset::cache(const std::string& filename) const {
  if (filename.empty()) detail::invalid("Dataset.cache: the file name is empty");
  return then(Dataset(detail::make_file_cache_node(node_, filename)),
              [=](const Dataset& d, int64_t) { return d.cache(filename); });
}

Dataset Dataset::repeat(int64_t count) const {
  if (count < -1) {
    detail::invalid("Dataset.repeat: count must be -1 (forever) or at least 0, not " +
                    std::to_string(count));
  }
  return then(Dataset(std::make_shared<detail::RepeatNode>(node_, count)),
              [=](const Dataset& d, int64_t) { return d.repeat(count); });
}

Dataset Dataset::take(int64_t n) const {
  if (n < -1) {
    detail::invalid("Dataset.take: n must be -1 (all) or at least 0, not " + std::to_string(n));
  }
  if (n == -1) return *this;
  return then(Dataset(std::make_shared<detail::TakeNode>(node_, n)),
              [=](const Dataset& d, int64_t) { return d.take(n); });
}

Dataset Dataset::skip(int64_t n) const {
  if (n < -1) {
    detail::invalid("Dataset.skip: n must be -1 (all) or at least 0, not " + std::to_string(n));
  }
  Remake remake = [=](const Dataset& d, int64_t) { return d.skip(n); };
  if (n == -1) return then(Dataset(std::make_shared<detail::TakeNode>(node_, 0)), remake);
  return then(Dataset(std::make_shared<detail::SkipNode>(node_, n)), remake);
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  if (num_shards < 1 || index < 0 || index >= num_shards) {
    detail::invalid("Dataset.shard: need num_shards >= 1 and 0 <= index < num_shards, got " +
                    std::to_string(num_shards) + " shards and index " + std::to_string(index));
  }
  return then(Dataset(std::make_shared<detail::ShardNode>(node_, num_shards, index)),
              [=](const Dataset& d, int64_t) { return d.shard(num_shards, index); });
}

}  // namespace kiln::data

// cache(): the elements of the first complete epoch kept in memory, or in a file that later
// epochs and later runs read instead of the upstream pipeline. The file is TFRecord-framed:
// a header record (format and the upstream's description), one record per element, and a
// footer record with the element count; it is written to a temporary file renamed into place
// only after a complete epoch, and rebuilt when its header or any CRC does not match.
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include "kiln/io/tfrecord.h"
#include "src/api/data/dataset_node.h"
#include "src/api/io/file_io.h"

namespace kiln::data::detail {
namespace {

// ---- in memory ----

struct MemoryCache {
  std::mutex mu;
  std::shared_ptr<const std::vector<Element>> elements;  // set by the first complete epoch
};

class MemoryCacheNode : public DatasetNode {
 public:
  explicit MemoryCacheNode(NodePtr input)
      : input_(std::move(input)), cache_(std::make_shared<MemoryCache>()) {}

  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      std::shared_ptr<MemoryCache> cache;
      std::shared_ptr<const std::vector<Element>> cached;  // reading
      size_t index = 0;
      std::unique_ptr<IteratorImpl> input;  // filling
      std::vector<Element> collected;
      std::optional<Element> next() override {
        if (cached) {
          if (index == cached->size()) return std::nullopt;
          return (*cached)[index++];
        }
        if (!input) return std::nullopt;
        std::optional<Element> e = input->next();
        if (e) {
          collected.push_back(*e);
          return e;
        }
        input.reset();
        std::lock_guard lock(cache->mu);
        if (!cache->elements) {
          cache->elements = std::make_shared<const std::vector<Element>>(std::move(collected));
        }
        return std::nullopt;
      }
    };
    auto it = std::make_unique<It>();
    it->cache = cache_;
    {
      std::lock_guard lock(cache_->mu);
      it->cached = cache_->elements;
    }
    if (!it->cached) it->input = input_->make_iterator(epoch);
    return it;
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  std::string describe() const override { return input_->describe(); }

 private:
  NodePtr input_;
  std::shared_ptr<MemoryCache> cache_;
};

// ---- in a file ----

constexpr char kMagic[] = "kiln.data.cache v1\n";
constexpr char kElementTag = 'E';
constexpr char kFooterTag = 'F';
constexpr int kMaxRank = 64;

void put(std::string& out, const void* data, size_t n) {
  out.append(static_cast<const char*>(data), n);
}

std::string encode_element(const Element& e, const std::string& filename) {
  std::string out(1, kElementTag);
  auto components = static_cast<uint32_t>(e.size());
  put(out, &components, 4);
  for (size_t c = 0; c < e.size(); ++c) {
    const Tensor& t = e[c];
    if (!t.defined() || t.is_symbolic()) {
      invalid("Dataset.cache: " + filename + ": component " + std::to_string(c) +
              " of an element is not a concrete tensor");
    }
    auto dtype = static_cast<uint8_t>(t.dtype());
    auto rank = static_cast<uint8_t>(t.rank());
    put(out, &dtype, 1);
    put(out, &rank, 1);
    put(out, t.shape().data(), t.shape().size() * 8);
    if (t.nbytes()) put(out, t.raw_data(), t.nbytes());
  }
  return out;
}

// Reads an element record into `out` (or only checks it, when out is null); throws kDataLoss
// naming the file if it is not one.
void decode_element(std::string_view record, const std::string& filename, Element* out) {
  auto corrupt = [&](const std::string& what) {
    throw Error(ErrorCode::kDataLoss, "Dataset.cache: " + filename + ": " + what);
  };
  auto get = [&](void* dst, size_t n) {
    if (record.size() < n) corrupt("truncated element record");
    std::memcpy(dst, record.data(), n);
    record.remove_prefix(n);
  };
  char tag;
  get(&tag, 1);
  if (tag != kElementTag) corrupt("expected an element record");
  uint32_t components;
  get(&components, 4);
  if (components > record.size()) corrupt("bad component count");
  for (uint32_t c = 0; c < components; ++c) {
    uint8_t dtype, rank;
    get(&dtype, 1);
    get(&rank, 1);
    if (dtype >= kNumDTypes || rank > kMaxRank) corrupt("bad tensor header");
    Shape shape(rank);
    get(shape.data(), rank * 8);
    uint64_t elements = 1;
    for (int64_t d : shape) {
      if (d < 0) corrupt("bad tensor shape");
      if (d != 0 && elements > record.size() / static_cast<uint64_t>(d)) {
        corrupt("tensor larger than its record");
      }
      elements *= static_cast<uint64_t>(d);
    }
    uint64_t nbytes = elements * dtype_size(static_cast<DType>(dtype));
    if (nbytes > record.size()) corrupt("tensor larger than its record");
    if (out) {
      out->push_back(Tensor::from_bytes(static_cast<DType>(dtype), std::move(shape), record.data(),
                                        static_cast<size_t>(nbytes)));
    }
    record.remove_prefix(static_cast<size_t>(nbytes));
  }
  if (!record.empty()) corrupt("trailing bytes in an element record");
}

std::string encode_footer(int64_t count) {
  std::string out(1, kFooterTag);
  put(out, &count, 8);
  return out;
}

// Size and modification time: a file we have checked and not seen change since.
struct FileStamp {
  int64_t size = -1;
  int64_t mtime_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

std::optional<FileStamp> stamp_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileStamp{static_cast<int64_t>(st.st_size),
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

class FileCacheNode : public DatasetNode, public std::enable_shared_from_this<FileCacheNode> {
 public:
  FileCacheNode(NodePtr input, std::string filename)
      : input_(std::move(input)), filename_(std::move(filename)) {}

  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  std::string describe() const override { return input_->describe(); }

  const NodePtr& input() const { return input_; }
  const std::string& filename() const { return filename_; }
  std::string header() const { return kMagic + input_->describe(); }

  // Whether the file holds this pipeline's elements, complete and intact. A full check reads
  // the whole file; it is remembered until the file changes.
  bool file_is_usable() const {
    std::optional<FileStamp> stamp = stamp_of(filename_);
    if (!stamp) return false;
    std::string expected = header();
    {
      std::lock_guard lock(mu_);
      if (checked_ && *checked_ == *stamp && checked_header_ == expected) return true;
    }
    try {
      io::RecordReader reader(filename_);
      std::string record;
      if (!reader.next(record) || record != expected) return false;
      int64_t count = 0;
      while (reader.next(record)) {
        if (!record.empty() && record[0] == kFooterTag) {
          int64_t claimed = -1;
          if (record.size() == 9) std::memcpy(&claimed, record.data() + 1, 8);
          if (claimed != count || reader.next(record)) return false;
          remember(*stamp, expected);
          return true;
        }
        decode_element(record, filename_, nullptr);
        ++count;
      }
      return false;  // no footer: truncated
    } catch (const Error&) {
      return false;  // unreadable or corrupt: rebuild it
    }
  }

  void remember(const FileStamp& stamp, const std::string& header) const {
    std::lock_guard lock(mu_);
    checked_ = stamp;
    checked_header_ = header;
  }
  void forget() const {
    std::lock_guard lock(mu_);
    checked_.reset();
  }

 private:
  NodePtr input_;
  std::string filename_;
  mutable std::mutex mu_;
  mutable std::optional<FileStamp> checked_;
  mutable std::string checked_header_;
};

class FileCacheIterator : public IteratorImpl {
 public:
  FileCacheIterator(std::shared_ptr<const FileCacheNode> node, int64_t epoch)
      : node_(std::move(node)), epoch_(epoch) {}

  std::optional<Element> next() override {
    if (!started_) start();
    if (reader_) return read();
    if (input_) return write();
    return std::nullopt;
  }

 private:
  // The decision is made at the first next(), so that begin_epoch stays cheap and errors
  // arrive where errors are expected.
  void start() {
    started_ = true;
    const std::string& filename = node_->filename();
    if (node_->file_is_usable()) {
      reader_.emplace(filename);
      std::string header;
      reader_->next(header);
      return;
    }
    std::filesystem::path parent = std::filesystem::path(filename).parent_path();
    if (!parent.empty()) io::internal::make_directories(parent.string(), "Dataset.cache");
    header_ = node_->header();
    input_ = node_->input()->make_iterator(epoch_);
    out_ = std::make_unique<io::internal::OutputFile>(
        filename, io::internal::OutputFile::Mode::kAtomic, io::Compression::kNone, "Dataset.cache");
    io::internal::write_record(*out_, header_);
  }

  // The file was checked before this epoch; it can only fail here if something changed it
  // since (within the file system's time resolution). Then the next epoch checks it again,
  // and rebuilds it.
  std::optional<Element> read() {
    try {
      std::string record;
      if (!reader_->next(record)) {
        throw Error(ErrorCode::kDataLoss,
                    "Dataset.cache: " + node_->filename() + ": the file ended without its footer");
      }
      if (!record.empty() && record[0] == kFooterTag) {
        reader_.reset();
        return std::nullopt;
      }
      Element e;
      decode_element(record, node_->filename(), &e);
      return e;
    } catch (const Error& e) {
      node_->forget();
      throw Error(e.code(), std::string(e.what()) +
                                " (the cache file changed while in use; the next epoch rebuilds "
                                "it)");
    }
  }

  std::optional<Element> write() {
    std::optional<Element> e = input_->next();
    if (e) {
      io::internal::write_record(*out_, encode_element(*e, node_->filename()));
      ++written_;
      return e;
    }
    input_.reset();
    io::internal::write_record(*out_, encode_footer(written_));
    out_->close();  // the rename: only a complete epoch becomes the cache file
    out_.reset();
    if (std::optional<FileStamp> stamp = stamp_of(node_->filename())) {
      node_->remember(*stamp, header_);
    }
    return std::nullopt;
  }

  std::shared_ptr<const FileCacheNode> node_;
  int64_t epoch_;
  bool started_ = false;
  std::optional<io::RecordReader> reader_;
  std::string header_;
  std::unique_ptr<IteratorImpl> input_;
  std::unique_ptr<io::internal::OutputFile> out_;  // destroyed unclosed: the temp file goes
  int64_t written_ = 0;
};

std::unique_ptr<IteratorImpl> FileCacheNode::make_iterator(int64_t epoch) const {
  return std::make_unique<FileCacheIterator>(shared_from_this(), epoch);
}

}  // namespace

NodePtr make_memory_cache_node(NodePtr input) {
  return std::make_shared<MemoryCacheNode>(std::move(input));
}

NodePtr make_file_cache_node(NodePtr input, std::string filename) {
  return std::make_shared<FileCacheNode>(std::move(input), std::move(filename));
}

}  // namespace kiln::data::detail

// Dataset sources: slices of tensors, IDX files, TFRecord files (interleaved as tf.data's
// interleave does), lines of text files and fields of CSV files.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <utility>

#include "kiln/data/dataset.h"
#include "kiln/data/idx.h"
#include "src/api/data/dataset_node.h"

namespace kiln::data {
namespace detail {
namespace {

// ---- from_tensors ----

class TensorSliceNode : public DatasetNode, public std::enable_shared_from_this<TensorSliceNode> {
 public:
  explicit TensorSliceNode(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {}

  std::unique_ptr<IteratorImpl> make_iterator(int64_t) const override {
    struct It : IteratorImpl {
      std::shared_ptr<const TensorSliceNode> node;
      int64_t index = 0;
      std::optional<Element> next() override {
        if (index >= node->cardinality()) return std::nullopt;
        return node->element_at(index++);
      }
      const DatasetNode* row_source() const override { return node.get(); }
      void next_indices(int64_t n, std::vector<int64_t>& out) override {
        for (; n > 0 && index < node->cardinality(); --n) out.push_back(index++);
      }
    };
    auto it = std::make_unique<It>();
    it->node = shared_from_this();
    return it;
  }
  int64_t cardinality() const override { return tensors_[0].dim(0); }
  bool random_access() const override { return true; }
  bool gathers_rows() const override { return true; }
  Element gather_rows(const std::vector<int64_t>& indices) const override {
    Element e;
    e.reserve(tensors_.size());
    for (const Tensor& t : tensors_) {
      Shape shape = t.shape();
      shape[0] = static_cast<int64_t>(indices.size());
      Tensor batch = Tensor::empty(t.dtype(), std::move(shape));
      const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.dim(0));
      if (row_bytes > 0) {
        const auto* from = static_cast<const uint8_t*>(t.raw_data());
        auto* to = static_cast<uint8_t*>(batch.raw_mutable_data());
        for (int64_t i : indices) {
          std::memcpy(to, from + i * row_bytes, row_bytes);
          to += row_bytes;
        }
      }
      e.push_back(std::move(batch));
    }
    return e;
  }
  Element element_at(int64_t index) const override {
    Element e;
    e.reserve(tensors_.size());
    for (const Tensor& t : tensors_) {
      Shape row_shape(t.shape().begin() + 1, t.shape().end());
      size_t row_bytes = t.nbytes() / static_cast<size_t>(t.dim(0));
      const auto* base = static_cast<const uint8_t*>(t.raw_data());
      e.push_back(Tensor::from_bytes(t.dtype(), std::move(row_shape),
                                     row_bytes ? base + index * row_bytes : nullptr, row_bytes));
    }
    return e;
  }
  std::string describe() const override {
    // Hashing the data is the cost of a fingerprint that notices changed tensors; it is paid
    // once, and only by a pipeline with a cache file.
    std::call_once(described_, [&] {
      description_ = "from_tensors(";
      for (size_t i = 0; i < tensors_.size(); ++i) {
        const Tensor& t = tensors_[i];
        if (i) description_ += ",";
        description_ += std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + ":" +
                        hex64(hash_bytes(t.raw_data(), t.nbytes()));
      }
      description_ += ")";
    });
    return description_;
  }

 private:
  std::vector<Tensor> tensors_;
  mutable std::once_flag described_;
  mutable std::string description_;
};

// ---- tfrecord ----

class TFRecordNode : public DatasetNode {
 public:
  TFRecordNode(std::vector<std::string> files, io::Compression compression, Interleave interleave)
      : files_(std::move(files)), compression_(compression), interleave_(interleave) {}

  std::unique_ptr<IteratorImpl> make_iterator(int64_t) const override {
    // tf.data's InterleaveDataset: a cycle of open files; block_length records from the
    // current one, then on to the next slot; an ended file frees its slot, which the next
    // file of the list fills when the cycle comes back to it.
    struct It : IteratorImpl {
      std::vector<std::string> files;
      io::RecordReaderOptions options;
      int64_t block_length = 1;
      std::vector<std::unique_ptr<io::RecordReader>> cycle;
      size_t next_file = 0;
      size_t slot = 0;
      int64_t taken_in_block = 0;
      int64_t open = 0;

      void advance_slot() {
        taken_in_block = 0;
        slot = (slot + 1) % cycle.size();
      }
      std::optional<Element> next() override {
        while (next_file < files.size() || open > 0) {
          std::unique_ptr<io::RecordReader>& reader = cycle[slot];
          if (reader) {
            Tensor record;  // the data is read straight into it
            auto allocate = [&](size_t n) {
              record = Tensor::empty(u8, {static_cast<int64_t>(n)});
              return static_cast<uint8_t*>(record.raw_mutable_data());
            };
            if (reader->next_into(allocate)) {
              if (++taken_in_block == block_length) advance_slot();
              return Element{std::move(record)};
            }
            reader.reset();
            --open;
            advance_slot();
          } else if (next_file < files.size()) {
            reader = std::make_unique<io::RecordReader>(files[next_file++], options);
            ++open;
          } else {
            advance_slot();
          }
        }
        return std::nullopt;
      }
    };
    auto it = std::make_unique<It>();
    it->files = files_;
    it->options.compression = compression_;
    it->block_length = interleave_.block_length;
    // Slots beyond the number of files would stay empty: they change nothing.
    it->cycle.resize(std::max<size_t>(
        1, std::min<size_t>(files_.size(), static_cast<size_t>(interleave_.cycle_length))));
    return it;
  }
  int64_t cardinality() const override { return files_.empty() ? 0 : kUnknownCardinality; }
  std::string describe() const override {
    std::string s = "tfrecord([";
    for (size_t i = 0; i < files_.size(); ++i) s += (i ? "," : "") + describe_file(files_[i]);
    return s + "]," + std::to_string(static_cast<int>(compression_)) + "," +
           std::to_string(interleave_.cycle_length) + "," +
           std::to_string(interleave_.block_length) + ")";
  }

 private:
  std::vector<std::string> files_;
  io::Compression compression_;
  Interleave interleave_;
};

// ---- text lines and CSV ----

// Reads the lines of files one after the other, without "\n" or "\r\n", counting them.
class LineReader {
 public:
  explicit LineReader(std::vector<std::string> files, const char* who)
      : files_(std::move(files)), who_(who) {}

  // False at the end of the last file.
  bool next(std::string& line) {
    for (;;) {
      if (!in_.is_open()) {
        if (file_ >= files_.size()) return false;
        in_.open(files_[file_], std::ios::binary);
        if (!in_) {
          throw Error(ErrorCode::kNotFound, std::string(who_) + ": cannot open " + files_[file_]);
        }
        line_number_ = 0;
      }
      if (std::getline(in_, line)) {
        ++line_number_;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      if (in_.bad()) {
        throw Error(ErrorCode::kDataLoss, std::string(who_) + ": " + path() +
                                              ": read error after line " +
                                              std::to_string(line_number_));
      }
      in_.close();
      ++file_;
    }
  }
  const std::string& path() const { return files_[file_]; }
  int64_t line_number() const { return line_number_; }

 private:
  std::vector<std::string> files_;
  const char* who_;
  std::ifstream in_;
  size_t file_ = 0;
  int64_t line_number_ = 0;
};

std::string describe_files(const char* name, const std::vector<std::string>& files) {
  std::string s = std::string(name) + "([";
  for (size_t i = 0; i < files.size(); ++i) s += (i ? "," : "") + describe_file(files[i]);
  return s + "]";
}

class TextLineNode : public DatasetNode {
 public:
  explicit TextLineNode(std::vector<std::string> files) : files_(std::move(files)) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t) const override {
    struct It : IteratorImpl {
      LineReader reader;
      std::string line;
      explicit It(std::vector<std::string> files) : reader(std::move(files), "text_lines") {}
      std::optional<Element> next() override {
        if (!reader.next(line)) return std::nullopt;
        return Element{
            Tensor::from_bytes(u8, {static_cast<int64_t>(line.size())}, line.data(), line.size())};
      }
    };
    return std::make_unique<It>(files_);
  }
  int64_t cardinality() const override { return files_.empty() ? 0 : kUnknownCardinality; }
  std::string describe() const override { return describe_files("text_lines", files_) + ")"; }

 private:
  std::vector<std::string> files_;
};

bool is_blank(char c, char delimiter) { return (c == ' ' || c == '\t') && c != delimiter; }

class CsvNode : public DatasetNode, public std::enable_shared_from_this<CsvNode> {
 public:
  CsvNode(std::vector<std::string> files, CsvOptions options)
      : files_(std::move(files)), options_(std::move(options)) {}

  std::unique_ptr<IteratorImpl> make_iterator(int64_t) const override {
    struct It : IteratorImpl {
      std::shared_ptr<const CsvNode> node;
      LineReader reader;
      std::string line;
      It(std::shared_ptr<const CsvNode> n, std::vector<std::string> files)
          : node(std::move(n)), reader(std::move(files), "csv") {}
      std::optional<Element> next() override {
        while (reader.next(line)) {
          if (node->options_.header && reader.line_number() == 1) continue;
          bool blank = true;
          for (char c : line) blank = blank && is_blank(c, node->options_.delimiter);
          if (blank) continue;
          return node->parse_line(line, reader);
        }
        return std::nullopt;
      }
    };
    return std::make_unique<It>(shared_from_this(), files_);
  }
  int64_t cardinality() const override { return files_.empty() ? 0 : kUnknownCardinality; }
  std::string describe() const override {
    std::string s = describe_files("csv", files_) + ",[";
    for (const CsvColumn& c : options_.columns) {
      s += std::string(dtype_name(c.dtype)) + ":" +
           (c.default_value ? std::to_string(*c.default_value) : "required") + ";";
    }
    return s + "]," + (options_.header ? "header," : "") + "'" + options_.delimiter + "')";
  }

 private:
  Element parse_line(const std::string& line, const LineReader& reader) const {
    const std::vector<CsvColumn>& columns = options_.columns;
    auto where = [&](size_t column) {
      std::string s = "csv: " + reader.path() + " line " + std::to_string(reader.line_number()) +
                      ", column " + std::to_string(column + 1);
      if (!columns[column].name.empty()) s += " (\"" + columns[column].name + "\")";
      return s;
    };
    Element e;
    e.reserve(columns.size());
    size_t begin = 0;
    for (size_t c = 0;; ++c) {
      size_t end = line.find(options_.delimiter, begin);
      if (end == std::string::npos) end = line.size();
      if (c < columns.size()) {
        e.push_back(parse_field(std::string_view(line).substr(begin, end - begin), c, where));
      }
      if (end == line.size()) {
        if (c + 1 != columns.size()) {
          invalid("csv: " + reader.path() + " line " + std::to_string(reader.line_number()) +
                  ": expected " + std::to_string(columns.size()) + " fields, found " +
                  std::to_string(c + 1));
        }
        return e;
      }
      begin = end + 1;
    }
  }

  template <class Where>
  Tensor parse_field(std::string_view field, size_t column, const Where& where) const {
    const CsvColumn& col = options_.columns[column];
    while (!field.empty() && is_blank(field.front(), options_.delimiter)) field.remove_prefix(1);
    while (!field.empty() && is_blank(field.back(), options_.delimiter)) field.remove_suffix(1);
    if (field.size() >= 2 && field.front() == '"' && field.back() == '"') {
      field = field.substr(1, field.size() - 2);
    }
    if (field.empty()) {
      if (!col.default_value) invalid(where(column) + ": empty field and no default value");
      return default_tensor(col);
    }
    std::string_view digits = field;
    if (digits.size() > 1 && digits[0] == '+') digits.remove_prefix(1);  // from_chars refuses '+'
    const char* first = digits.data();
    const char* last = first + digits.size();
    auto bad = [&](const char* why) -> Tensor {
      invalid(where(column) + ": cannot parse \"" + std::string(field) + "\" as " +
              dtype_name(col.dtype) + why);
    };
    if (col.dtype == f32) {
      float v;
      auto [ptr, ec] = std::from_chars(first, last, v);
      if (ec == std::errc::result_out_of_range) return bad(" (out of range)");
      if (ec != std::errc() || ptr != last) return bad("");
      return Tensor::scalar(v);
    }
    int64_t v;
    auto [ptr, ec] = std::from_chars(first, last, v);
    if (ec == std::errc::result_out_of_range) return bad(" (out of range)");
    if (ec != std::errc() || ptr != last) return bad("");
    if (col.dtype == i64) return Tensor::scalar(v);
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return bad(" (out of range)");
    }
    return Tensor::scalar(static_cast<int32_t>(v));
  }

  static Tensor default_tensor(const CsvColumn& col) {
    double v = *col.default_value;
    if (col.dtype == f32) return Tensor::scalar(static_cast<float>(v));
    if (col.dtype == i64) return Tensor::scalar(static_cast<int64_t>(v));
    return Tensor::scalar(static_cast<int32_t>(v));
  }

  std::vector<std::string> files_;
  CsvOptions options_;
};

void check_csv_options(const CsvOptions& options) {
  if (options.columns.empty()) invalid("Dataset.csv: no columns");
  if (options.delimiter == '\n' || options.delimiter == '\r' || options.delimiter == '"') {
    invalid("Dataset.csv: the delimiter cannot be a newline or a quote");
  }
  for (size_t i = 0; i < options.columns.size(); ++i) {
    const CsvColumn& c = options.columns[i];
    std::string col = "Dataset.csv: column " + std::to_string(i + 1);
    if (c.dtype != f32 && c.dtype != i64 && c.dtype != i32) {
      invalid(col + " has dtype " + dtype_name(c.dtype) + "; columns are f32, i64 or i32");
    }
    if (!c.default_value || c.dtype == f32) continue;
    double v = *c.default_value;
    double lo = c.dtype == i32 ? -2147483648.0 : -9223372036854775808.0;
    double hi = c.dtype == i32 ? 2147483647.0 : 9223372036854775807.0;
    if (v != std::floor(v) || !(v >= lo && v < hi + 1)) {
      invalid(col + ": default value " + std::to_string(v) + " is not an " + dtype_name(c.dtype));
    }
  }
}

}  // namespace
}  // namespace detail

Dataset Dataset::from_tensors(std::vector<Tensor> tensors) {
  if (tensors.empty()) detail::invalid("Dataset.from_tensors: no tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    std::string which = "Dataset.from_tensors: tensor " + std::to_string(i);
    if (!t.defined()) detail::invalid(which + " is undefined");
    if (t.is_symbolic()) detail::invalid(which + " is symbolic; datasets hold concrete tensors");
    if (t.rank() == 0) detail::invalid(which + " is a scalar; slicing needs rank >= 1");
    if (t.dim(0) != tensors[0].dim(0)) {
      detail::invalid(
          "Dataset.from_tensors: tensors have different sizes in dimension 0: "
          "tensor 0 is " +
          shape_str(tensors[0].shape()) + ", tensor " + std::to_string(i) + " is " +
          shape_str(t.shape()));
    }
  }
  return Dataset(std::make_shared<detail::TensorSliceNode>(std::move(tensors)));
}

Dataset Dataset::from_idx(const std::string& images_path, const std::string& labels_path) {
  Tensor images = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  if (images.dim(0) != labels.dim(0)) {
    detail::invalid("Dataset.from_idx: " + images_path + " holds " + std::to_string(images.dim(0)) +
                    " items but " + labels_path + " holds " + std::to_string(labels.dim(0)));
  }
  return from_tensors({std::move(images), std::move(labels)});
}

Dataset Dataset::tfrecord(std::vector<std::string> files, io::Compression compression,
                          Interleave interleave) {
  if (interleave.cycle_length < 1 || interleave.block_length < 1) {
    detail::invalid("Dataset.tfrecord: cycle_length and block_length must be at least 1, not " +
                    std::to_string(interleave.cycle_length) + " and " +
                    std::to_string(interleave.block_length));
  }
  std::vector<std::string> names = files;
  return Dataset(std::make_shared<detail::TFRecordNode>(std::move(files), compression, interleave))
      .made_from(std::move(names), [=](std::vector<std::string> f) {
        return tfrecord(std::move(f), compression, interleave);
      });
}

Dataset Dataset::text_lines(std::vector<std::string> files) {
  std::vector<std::string> names = files;
  return Dataset(std::make_shared<detail::TextLineNode>(std::move(files)))
      .made_from(std::move(names),
                 [](std::vector<std::string> f) { return text_lines(std::move(f)); });
}

Dataset Dataset::csv(std::vector<std::string> files, CsvOptions options) {
  detail::check_csv_options(options);
  std::vector<std::string> names = files;
  return Dataset(std::make_shared<detail::CsvNode>(std::move(files), options))
      .made_from(std::move(names),
                 [options](std::vector<std::string> f) { return csv(std::move(f), options); });
}

}  // namespace kiln::data

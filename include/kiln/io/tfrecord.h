// TFRecord files: a sequence of records, each framed as
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   length bytes of data | uint32 masked CRC-32C of the data,
// optionally inside one gzip or zlib stream. Compatible with TensorFlow's tf.io.TFRecordWriter
// and tf.data.TFRecordDataset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::io {

enum class Compression { kNone, kGzip, kZlib };

// Writes records to `path`. The file appears atomically on close(): the records go to a
// temporary file in the same directory, which close() syncs and renames over `path`, so a
// reader sees the previous file or the complete new one. A writer destroyed without close()
// closes itself, unless it is destroyed by an exception unwinding the stack: then the partial
// file is discarded. Errors (kFailedPrecondition for I/O, kNotFound for a missing directory)
// throw kiln::Error naming the file; call close() to see errors of the last step. Movable; a
// moved-from writer may only be destroyed or assigned to.
class RecordWriter {
 public:
  explicit RecordWriter(const std::string& path, Compression compression = Compression::kNone);
  ~RecordWriter();
  RecordWriter(RecordWriter&&) noexcept;
  RecordWriter& operator=(RecordWriter&&) noexcept;

  void write(std::string_view record);
  void close();
  const std::string& path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct RecordReaderOptions {
  Compression compression = Compression::kNone;
  // Skip corrupt records instead of throwing, and count them in corrupt_records(). A record
  // whose data CRC does not match is skipped and reading goes on with the next one. Damage to
  // the framing itself (a length whose CRC does not match, a truncated record, a corrupt
  // compressed stream) leaves no way to find the next record: it counts as one corrupt record
  // and ends the file.
  bool skip_corrupt = false;
};

// Reads the records of a file in order, checking both CRCs of each.
//   RecordReader reader(path);
//   for (const std::string& record : reader) ...
// Errors throw kiln::Error naming the file and the byte offset of the record (in the
// decompressed data for a compressed file): kNotFound when the file cannot be opened,
// kDataLoss for a corrupt or truncated record. A length field is never believed beyond the
// data: a length larger than the rest of an uncompressed file, or than 1 GiB where the size is
// not known ahead (a compressed file, a pipe), fails before any memory is allocated for it;
// below that, a record's buffer grows only as its data arrives. Movable; a moved-from reader
// may only be destroyed or assigned to.
class RecordReader {
 public:
  explicit RecordReader(const std::string& path, RecordReaderOptions options = {});
  ~RecordReader();
  RecordReader(RecordReader&&) noexcept;
  RecordReader& operator=(RecordReader&&) noexcept;

  // Reads the next record into `record`; false at the end of the file.
  bool next(std::string& record);
  std::optional<std::string> next();
  // Reads the next record into the storage that allocate(length) returns (length bytes, for
  // example a tensor's), without a copy where the file's size is known. allocate is called
  // once the length field has been checked against the data, and again for each record
  // skipped as corrupt; what it returned for a record that then fails is not the record.
  bool next_into(const std::function<uint8_t*(size_t)>& allocate);

  // The byte offset where the next record starts.
  uint64_t offset() const;
  // With skip_corrupt: how many corrupt records were skipped, and what was wrong with the last.
  int64_t corrupt_records() const;
  const std::string& last_corruption() const;
  const std::string& path() const;

  // Single-pass input iteration over the remaining records.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = std::string;
    using difference_type = std::ptrdiff_t;
    using pointer = const std::string*;
    using reference = const std::string&;

    Iterator() = default;
    explicit Iterator(RecordReader* reader) : reader_(reader) { ++*this; }
    const std::string& operator*() const { return record_; }
    const std::string* operator->() const { return &record_; }
    Iterator& operator++() {
      if (!reader_->next(record_)) reader_ = nullptr;
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(const Iterator& other) const { return reader_ == other.reader_; }

   private:
    RecordReader* reader_ = nullptr;
    std::string record_;
  };
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

 private:
  // Reads into `record`, or through `allocate` (see next_into); with skip_corrupt, an error
  // that loses the framing ends the file, counted.
  bool next_or_skip(std::string& record, const std::function<uint8_t*(size_t)>* allocate);

  struct State;
  std::unique_ptr<State> state_;
};

// Every record of a file (see RecordReader).
std::vector<std::string> read_records(const std::string& path, RecordReaderOptions options = {});

}  // namespace kiln::io

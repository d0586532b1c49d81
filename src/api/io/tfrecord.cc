// TFRecord reader and writer: the framing (length, masked CRC-32C of the length, data, masked
// CRC-32C of the data) over InputStream/OutputFile, with every length checked before use.
#include "kiln/io/tfrecord.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>

#include "src/api/io/crc32c.h"
#include "src/api/io/file_io.h"

namespace kiln::io {
namespace {

constexpr size_t kHeaderBytes = 12;  // length + masked CRC of the length
constexpr size_t kFooterBytes = 4;   // masked CRC of the data
// When the size of the data is not known ahead (a compressed file, a pipe), a record may claim
// at most this much, and its buffer grows only as its data arrives.
constexpr uint64_t kMaxStreamedRecord = uint64_t{1} << 30;
constexpr uint64_t kFirstGrowth = uint64_t{1} << 20;

void store_le(uint8_t* dst, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t load_le(const uint8_t* src, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | src[i];
  return v;
}

std::string hex32(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}

}  // namespace

void internal::write_record(internal::OutputFile& file, std::string_view data) {
  uint8_t header[kHeaderBytes];
  store_le(header, data.size(), 8);
  store_le(header + 8, crc32c::mask(crc32c::value(header, 8)), 4);
  uint8_t footer[kFooterBytes];
  store_le(footer, crc32c::mask(crc32c::value(data)), 4);
  file.write(header, sizeof header);
  file.write(data.data(), data.size());
  file.write(footer, sizeof footer);
}

// ---- RecordWriter ----

struct RecordWriter::State {
  internal::OutputFile file;
  int uncaught_exceptions = std::uncaught_exceptions();
  State(const std::string& path, Compression compression)
      : file(path, internal::OutputFile::Mode::kAtomic, compression, "RecordWriter") {}

  // What destruction does: close, unless an exception is unwinding the stack past the writer,
  // in which case the records are incomplete and the file must not appear.
  void finish() noexcept {
    if (file.closed() || std::uncaught_exceptions() > uncaught_exceptions) return;
    try {
      file.close();
    } catch (const Error&) {
      // Nowhere to report it; close() explicitly to see errors.
    }
  }
};

RecordWriter::RecordWriter(const std::string& path, Compression compression)
    : state_(std::make_unique<State>(path, compression)) {}

RecordWriter::~RecordWriter() {
  if (state_) state_->finish();
}

RecordWriter::RecordWriter(RecordWriter&&) noexcept = default;
RecordWriter& RecordWriter::operator=(RecordWriter&& other) noexcept {
  if (this != &other) {
    if (state_) state_->finish();
    state_ = std::move(other.state_);
  }
  return *this;
}

void RecordWriter::write(std::string_view record) {
  if (!state_) throw Error(ErrorCode::kFailedPrecondition, "RecordWriter: used after a move");
  internal::write_record(state_->file, record);
}

void RecordWriter::close() {
  if (state_) state_->file.close();
}

const std::string& RecordWriter::path() const { return state_->file.path(); }

// ---- RecordReader ----

struct RecordReader::State {
  internal::InputStream in;
  RecordReaderOptions options;
  std::string path;
  bool done = false;
  int64_t corrupt_records = 0;
  std::string last_corruption;
  std::string scratch;  // next_into's record, for data of unknown size

  State(const std::string& p, RecordReaderOptions o)
      : in(p, o.compression, "RecordReader"), options(o), path(p) {}

  // A corrupt record at `start`: throws, or (skip_corrupt) counts it; `fatal` damage also ends
  // the file, since the next record cannot be found.
  void corrupt(uint64_t start, bool fatal, const std::string& what) {
    const std::string message =
        "RecordReader: " + path + ": record at " + in.where(start) + ": " + what;
    if (!options.skip_corrupt) throw Error(ErrorCode::kDataLoss, message);
    ++corrupt_records;
    last_corruption = message;
    if (fatal) done = true;
  }

  // Reads `length` bytes of data into `record`, growing the buffer only as data arrives when
  // the size of the file is unknown. False if the data ends first.
  bool read_data(std::string& record, uint64_t length, bool size_known) {
    record.clear();
    uint64_t have = 0;
    while (have < length) {
      const uint64_t step =
          size_known ? length : std::min(length - have, std::max(have, kFirstGrowth));
      record.resize(have + step);
      const size_t got = in.read(reinterpret_cast<uint8_t*>(record.data()) + have, step);
      have += got;
      if (got < step) {
        record.resize(have);
        return false;
      }
    }
    return true;
  }

  // Reads the next record into `record`; or, given `allocate`, into the storage it returns
  // (called with the length once the length is known to fit in the file; for data of unknown
  // size, after the data has arrived in `record`, which it is copied from).
  bool next(std::string& record, const std::function<uint8_t*(size_t)>* allocate = nullptr) {
    while (!done) {
      const uint64_t start = in.offset();
      uint8_t header[kHeaderBytes];
      const size_t got = in.read(header, kHeaderBytes);
      if (got == 0) {
        done = true;
        return false;
      }
      if (got < kHeaderBytes) {
        corrupt(start, true,
                "truncated header: the data ends after " + std::to_string(got) + " of its " +
                    std::to_string(kHeaderBytes) + " bytes (length and length CRC)");
        continue;
      }
      const uint64_t length = load_le(header, 8);
      const uint32_t length_crc = crc32c::mask(crc32c::value(header, 8));
      if (length_crc != load_le(header + 8, 4)) {
        corrupt(start, true,
                "corrupt length field: its CRC does not match (stored masked CRC " +
                    hex32(static_cast<uint32_t>(load_le(header + 8, 4))) + ", computed " +
                    hex32(length_crc) + "; the length reads " + std::to_string(length) + ")" +
                    (start == 0 && !in.compressed()
                         ? " (if the file is compressed, set RecordReaderOptions::compression)"
                         : ""));
        continue;
      }
      const std::optional<uint64_t> remaining = in.remaining();
      if (remaining && length > *remaining) {
        corrupt(start, true,
                "truncated: the length field claims " + std::to_string(length) +
                    " bytes of data, but only " + std::to_string(*remaining) +
                    " bytes remain in the file");
        continue;
      }
      if (!remaining && length > kMaxStreamedRecord) {
        corrupt(start, true,
                "the length field claims " + std::to_string(length) +
                    " bytes of data, more than the 1 GiB limit for a record whose file size "
                    "is not known ahead (compressed data or a pipe)");
        continue;
      }
      const uint8_t* data;
      if (allocate && remaining) {
        uint8_t* out = (*allocate)(length);
        const size_t got = length ? in.read(out, length) : 0;
        if (got < length) {
          corrupt(start, true,
                  "truncated: the length field claims " + std::to_string(length) +
                      " bytes of data, but the data ends after " + std::to_string(got));
          continue;
        }
        data = out;
      } else {
        if (!read_data(record, length, remaining.has_value())) {
          corrupt(start, true,
                  "truncated: the length field claims " + std::to_string(length) +
                      " bytes of data, but the data ends after " + std::to_string(record.size()));
          continue;
        }
        data = reinterpret_cast<const uint8_t*>(record.data());
      }
      uint8_t footer[kFooterBytes];
      const size_t footer_got = in.read(footer, kFooterBytes);
      if (footer_got < kFooterBytes) {
        corrupt(start, true,
                "truncated: the data ends " + std::to_string(footer_got) +
                    " bytes into the 4-byte CRC after the record's " + std::to_string(length) +
                    " bytes of data");
        continue;
      }
      const uint32_t data_crc = crc32c::mask(crc32c::value(data, length));
      if (data_crc != load_le(footer, 4)) {
        corrupt(start, false,
                "corrupt data: the CRC of its " + std::to_string(length) +
                    " bytes does not match (stored masked CRC " +
                    hex32(static_cast<uint32_t>(load_le(footer, 4))) + ", computed " +
                    hex32(data_crc) + ")");
        continue;
      }
      if (allocate && !remaining) {
        uint8_t* out = (*allocate)(length);
        if (length) std::memcpy(out, data, length);
      }
      return true;
    }
    return false;
  }
};

RecordReader::RecordReader(const std::string& path, RecordReaderOptions options)
    : state_(std::make_unique<State>(path, options)) {}
RecordReader::~RecordReader() = default;
RecordReader::RecordReader(RecordReader&&) noexcept = default;
RecordReader& RecordReader::operator=(RecordReader&&) noexcept = default;

bool RecordReader::next_or_skip(std::string& record,
                                const std::function<uint8_t*(size_t)>* allocate) {
  if (!state_) throw Error(ErrorCode::kFailedPrecondition, "RecordReader: used after a move");
  try {
    return state_->next(record, allocate);
  } catch (const Error& e) {
    // A corrupt compressed stream or a read error: nothing after it can be trusted.
    if (!state_->options.skip_corrupt || e.code() != ErrorCode::kDataLoss) throw;
    ++state_->corrupt_records;
    state_->last_corruption = e.what();
    state_->done = true;
    return false;
  }
}

bool RecordReader::next(std::string& record) { return next_or_skip(record, nullptr); }

bool RecordReader::next_into(const std::function<uint8_t*(size_t)>& allocate) {
  if (!state_) throw Error(ErrorCode::kFailedPrecondition, "RecordReader: used after a move");
  return next_or_skip(state_->scratch, &allocate);
}

std::optional<std::string> RecordReader::next() {
  std::string record;
  if (!next(record)) return std::nullopt;
  return record;
}

uint64_t RecordReader::offset() const { return state_->in.offset(); }
int64_t RecordReader::corrupt_records() const { return state_->corrupt_records; }
const std::string& RecordReader::last_corruption() const { return state_->last_corruption; }
const std::string& RecordReader::path() const { return state_->path; }

std::vector<std::string> read_records(const std::string& path, RecordReaderOptions options) {
  RecordReader reader(path, options);
  std::vector<std::string> records;
  for (std::string record; reader.next(record);) records.push_back(std::move(record));
  return records;
}

}  // namespace kiln::io

// IDX reader and writer: a big-endian header and data, raw or inside a gzip stream (zlib),
// with every size the header claims checked against the data before memory is committed to it.
#include "kiln/data/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "kiln/shape.h"

namespace kiln::data {
namespace {

constexpr int kMaxRank = 8;
// A gzip file's real size is unknown until it is inflated. Data claimed beyond this many bytes
// goes into a buffer that grows as the data arrives, so a corrupt header cannot make us
// allocate an absurd size up front.
constexpr uint64_t kMaxUpfrontBytes = uint64_t{256} << 20;
constexpr uint64_t kFirstGrowthBytes = uint64_t{16} << 20;
constexpr size_t kIoChunk = size_t{1} << 16;

struct IdxType {
  uint8_t code;
  DType dtype;
  int width;  // bytes per element in the file
  const char* name;
};
constexpr IdxType kIdxTypes[] = {
    {0x08, u8, 1, "u8"},   {0x09, i8, 1, "i8"},   {0x0B, i32, 2, "i16"},
    {0x0C, i32, 4, "i32"}, {0x0D, f32, 4, "f32"}, {0x0E, f64, 8, "f64"},
};

const IdxType* idx_type_of_code(uint8_t code) {
  for (const IdxType& t : kIdxTypes) {
    if (t.code == code) return &t;
  }
  return nullptr;
}

const IdxType* idx_type_of_dtype(DType dtype) {
  for (const IdxType& t : kIdxTypes) {
    if (t.dtype == dtype && t.width == static_cast<int>(dtype_size(dtype))) return &t;
  }
  return nullptr;
}

std::string hex_byte(uint8_t b) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02x", b);
  return s;
}

// Converts `count` big-endian elements of `width` bytes to host order, in place.
void big_endian_to_host(uint8_t* data, size_t count, int width) {
  if constexpr (std::endian::native == std::endian::big) return;
  if (width == 4) {
    for (size_t i = 0; i < count; ++i) {
      uint32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      v = __builtin_bswap32(v);
      std::memcpy(data + 4 * i, &v, 4);
    }
  } else if (width == 8) {
    for (size_t i = 0; i < count; ++i) {
      uint64_t v;
      std::memcpy(&v, data + 8 * i, 8);
      v = __builtin_bswap64(v);
      std::memcpy(data + 8 * i, &v, 8);
    }
  }
}
// The same swap turns host order into big-endian.
void host_to_big_endian(uint8_t* data, size_t count, int width) {
  big_endian_to_host(data, count, width);
}

// The bytes of an IDX file in order: straight from the file, or inflated from its gzip stream
// (detected by the magic bytes 0x1f 0x8b). read() returns fewer bytes than asked only at the
// end of the data; a corrupt or truncated gzip stream throws.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(kIoChunk) {
    file_.reset(std::fopen(path.c_str(), "rb"));
    if (!file_) {
      fail(ErrorCode::kNotFound, std::string("cannot open the file: ") + std::strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(file_.get()), &st) == 0) {
      if (S_ISDIR(st.st_mode)) fail(ErrorCode::kNotFound, "is a directory, not an IDX file");
      if (S_ISREG(st.st_mode)) file_size_ = static_cast<uint64_t>(st.st_size);
    }
    zs_.next_in = in_.data();
    refill();
    gzip_ = zs_.avail_in >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
      if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) {
        fail(ErrorCode::kInternal, "zlib could not start inflating");
      }
      inflating_ = true;
    }
  }
  ~Reader() {
    if (inflating_) inflateEnd(&zs_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  size_t read(uint8_t* dst, size_t n) {
    size_t got = gzip_ ? inflate_into(dst, n) : copy_into(dst, n);
    offset_ += got;
    return got;
  }

  // Bytes of data read so far: the offset in the file, or in the decompressed stream.
  uint64_t offset() const { return offset_; }
  bool gzip() const { return gzip_; }
  // The size of the data when known before reading it: a regular, uncompressed file.
  std::optional<uint64_t> data_size() const { return gzip_ ? std::nullopt : file_size_; }
  // Where the data ended, for messages after a short read().
  std::string end_description() const {
    return std::string(gzip_ ? "the decompressed stream" : "the file") + " ends after " +
           std::to_string(offset_) + " bytes";
  }

  [[noreturn]] void fail(ErrorCode code, const std::string& what) const {
    throw Error(code, "read_idx: " + path_ + ": " + what);
  }

 private:
  // Moves unread input to the front of the buffer and fills the rest from the file.
  void refill() {
    if (zs_.avail_in > 0 && zs_.next_in != in_.data()) {
      std::memmove(in_.data(), zs_.next_in, zs_.avail_in);
    }
    zs_.next_in = in_.data();
    size_t n = std::fread(in_.data() + zs_.avail_in, 1, in_.size() - zs_.avail_in, file_.get());
    if (n == 0 && std::ferror(file_.get())) {
      fail(ErrorCode::kDataLoss, std::string("read error: ") + std::strerror(errno));
    }
    zs_.avail_in += static_cast<uInt>(n);
    file_read_ += n;
  }

  uint64_t compressed_offset() const { return file_read_ - zs_.avail_in; }

  size_t copy_into(uint8_t* dst, size_t n) {
    size_t got = std::min<size_t>(n, zs_.avail_in);
    std::memcpy(dst, zs_.next_in, got);
    zs_.next_in += got;
    zs_.avail_in -= static_cast<uInt>(got);
    if (got < n) {
      got += std::fread(dst + got, 1, n - got, file_.get());
      if (std::ferror(file_.get())) {
        fail(ErrorCode::kDataLoss, std::string("read error: ") + std::strerror(errno));
      }
    }
    return got;
  }

  size_t inflate_into(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n && !stream_done_) {
      if (zs_.avail_in == 0) refill();
      if (zs_.avail_in == 0) {
        fail(ErrorCode::kDataLoss,
             "the gzip stream is truncated: the file ends after " + std::to_string(file_read_) +
                 " compressed bytes, in the middle of the stream (after " +
                 std::to_string(offset_ + got) + " bytes of decompressed data)");
      }
      zs_.next_out = dst + got;
      zs_.avail_out = static_cast<uInt>(std::min<size_t>(n - got, size_t{1} << 30));
      const uInt room = zs_.avail_out;
      int rc = inflate(&zs_, Z_NO_FLUSH);
      got += room - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        start_next_member();
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        fail(ErrorCode::kDataLoss, "corrupt gzip stream at compressed offset " +
                                       std::to_string(compressed_offset()) + ": " +
                                       (zs_.msg ? zs_.msg : zError(rc)));
      }
    }
    return got;
  }

  // A gzip file may hold several members back to back; anything else after one is garbage.
  void start_next_member() {
    if (zs_.avail_in < 2) refill();
    if (zs_.avail_in == 0) {
      stream_done_ = true;
      return;
    }
    if (zs_.avail_in < 2 || zs_.next_in[0] != 0x1f || zs_.next_in[1] != 0x8b) {
      fail(ErrorCode::kDataLoss,
           "trailing garbage after the end of the gzip stream, at compressed offset " +
               std::to_string(compressed_offset()));
    }
    inflateReset(&zs_);
  }

  std::string path_;
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::optional<uint64_t> file_size_;
  std::vector<uint8_t> in_;  // file bytes not yet consumed: next_in / avail_in of zs_
  z_stream zs_{};
  bool gzip_ = false;
  bool inflating_ = false;
  bool stream_done_ = false;
  uint64_t file_read_ = 0;  // bytes read from the file
  uint64_t offset_ = 0;     // bytes of data handed out by read()
};

void read_header_bytes(Reader& in, uint8_t* dst, size_t n, const std::string& what) {
  const uint64_t at = in.offset();
  if (in.read(dst, n) < n) {
    in.fail(ErrorCode::kDataLoss, "truncated header: expected " + what + " (" + std::to_string(n) +
                                      " bytes) at offset " + std::to_string(at) + ", but " +
                                      in.end_description());
  }
}

[[noreturn]] void fail_truncated_data(const Reader& in, uint64_t nbytes, uint64_t start,
                                      uint64_t got, const std::string& claim) {
  in.fail(ErrorCode::kDataLoss,
          "truncated data: expected " + std::to_string(nbytes) + " bytes of data at offset " +
              std::to_string(start) + " for " + claim + ", but " +
              (in.gzip() ? "the decompressed stream" : "the file") + " ends after " +
              std::to_string(got) + " of them (at offset " + std::to_string(start + got) + ")");
}

// Reads `nbytes` of data into a new tensor of `dtype` and `shape` (as file bytes, not yet
// converted). Throws if the data ends first.
Tensor read_data_bytes(Reader& in, DType dtype, const Shape& shape, uint64_t nbytes,
                       const std::string& claim) {
  const uint64_t start = in.offset();
  auto truncated = [&]() { fail_truncated_data(in, nbytes, start, in.offset() - start, claim); };
  if (in.data_size() || nbytes <= kMaxUpfrontBytes) {
    Tensor out = Tensor::empty(dtype, shape);
    if (in.read(static_cast<uint8_t*>(out.raw_mutable_data()), nbytes) < nbytes) truncated();
    return out;
  }
  // Believe a large claim only as far as the data goes: grow geometrically as it arrives.
  std::vector<uint8_t> buffer;
  while (buffer.size() < nbytes) {
    const size_t old = buffer.size();
    const size_t step = static_cast<size_t>(
        std::min<uint64_t>(nbytes - old, std::max<uint64_t>(old, kFirstGrowthBytes)));
    buffer.resize(old + step);
    if (in.read(buffer.data() + old, step) < step) truncated();
  }
  Tensor out = Tensor::empty(dtype, shape);
  std::memcpy(out.raw_mutable_data(), buffer.data(), nbytes);
  return out;
}

// Turns the file's big-endian elements, held at the start of `t`'s storage, into `t`'s values.
void convert_file_data(const IdxType& type, Tensor& t) {
  auto* bytes = static_cast<uint8_t*>(t.raw_mutable_data());
  const size_t count = static_cast<size_t>(t.size());
  if (type.width == 2) {
    // i16 widens to i32 in place: walking backwards, element i (bytes 2i..2i+1) is read
    // before element i's 4 output bytes overwrite the file bytes of elements >= i.
    auto* out = reinterpret_cast<int32_t*>(bytes);
    for (size_t i = count; i-- > 0;) {
      out[i] = static_cast<int16_t>((bytes[2 * i] << 8) | bytes[2 * i + 1]);
    }
    return;
  }
  big_endian_to_host(bytes, count, type.width);
}

// --- writing ---

[[noreturn]] void write_fail(const std::string& path, ErrorCode code, const std::string& what) {
  throw Error(code, "write_idx: " + path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

// A file written under a temporary name in the target's directory, synced and renamed over
// the target by commit(); removed if destroyed before that.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path) : path_(path), temp_(path + ".tmp-XXXXXX") {
    fd_ = mkstemp(temp_.data());
    if (fd_ < 0) {
      write_fail(path_, errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kFailedPrecondition,
                 "cannot create a temporary file next to it: " + errno_text());
    }
    fchmod(fd_, 0644);  // mkstemp makes 0600; a data file is normally world-readable
  }
  ~AtomicFile() {
    if (fd_ >= 0) close(fd_);
    if (!committed_) unlink(temp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const uint8_t* data, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) write_fail(path_, ErrorCode::kFailedPrecondition, "write failed: " + errno_text());
      data += w;
      n -= static_cast<size_t>(w);
    }
  }

  void commit() {
    if (fsync(fd_) != 0)
      write_fail(path_, ErrorCode::kFailedPrecondition, "fsync failed: " + errno_text());
    int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0)
      write_fail(path_, ErrorCode::kFailedPrecondition, "close failed: " + errno_text());
    if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
      write_fail(path_, ErrorCode::kFailedPrecondition,
                 "cannot rename " + temp_ + " over it: " + errno_text());
    }
    committed_ = true;
    // Make the rename itself durable; a failure here loses nothing already written.
    size_t slash = path_.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
    int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
  }

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Bytes to an AtomicFile, deflated into a gzip stream when asked.
class Sink {
 public:
  Sink(AtomicFile& file, bool gzip, const std::string& path)
      : file_(file), gzip_(gzip), path_(path), out_(kIoChunk) {
    if (gzip_ && deflateInit2(&zs_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                              Z_DEFAULT_STRATEGY) != Z_OK) {
      write_fail(path_, ErrorCode::kInternal, "zlib could not start deflating");
    }
  }
  ~Sink() {
    if (gzip_) deflateEnd(&zs_);
  }
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  void write(const uint8_t* data, size_t n) {
    if (!gzip_) return file_.write(data, n);
    while (n > 0) {
      const size_t take = std::min<size_t>(n, size_t{1} << 30);
      zs_.next_in = const_cast<uint8_t*>(data);
      zs_.avail_in = static_cast<uInt>(take);
      deflate_all(Z_NO_FLUSH);
      data += take;
      n -= take;
    }
  }
  void finish() {
    if (gzip_) deflate_all(Z_FINISH);
  }

 private:
  // Runs deflate until it has taken all input (and, with Z_FINISH, ended the stream).
  void deflate_all(int flush) {
    int rc;
    do {
      zs_.next_out = out_.data();
      zs_.avail_out = static_cast<uInt>(out_.size());
      rc = deflate(&zs_, flush);
      if (rc == Z_STREAM_ERROR) write_fail(path_, ErrorCode::kInternal, "zlib deflate failed");
      file_.write(out_.data(), out_.size() - zs_.avail_out);
    } while (flush == Z_FINISH ? rc != Z_STREAM_END : zs_.avail_out == 0);
  }

  AtomicFile& file_;
  bool gzip_;
  std::string path_;
  std::vector<uint8_t> out_;
  z_stream zs_{};
};

}  // namespace

Tensor read_idx(const std::string& path) {
  Reader in(path);
  uint8_t magic[4];
  read_header_bytes(in, magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    in.fail(ErrorCode::kDataLoss,
            "bad magic number at offset 0: starts with " + hex_byte(magic[0]) + " " +
                hex_byte(magic[1]) +
                ", but an IDX file starts with two zero bytes, a type code and a rank");
  }
  const IdxType* type = idx_type_of_code(magic[2]);
  if (!type) {
    in.fail(ErrorCode::kDataLoss, "bad magic number: unknown IDX type code " + hex_byte(magic[2]) +
                                      " at offset 2 (known: 0x08 u8, 0x09 i8, 0x0b i16, "
                                      "0x0c i32, 0x0d f32, 0x0e f64)");
  }
  const int rank = magic[3];
  if (rank < 1 || rank > kMaxRank) {
    in.fail(ErrorCode::kDataLoss, "bad magic number: rank " + std::to_string(rank) +
                                      " at offset 3 is outside [1, " + std::to_string(kMaxRank) +
                                      "]");
  }

  uint8_t dims[4 * kMaxRank];
  read_header_bytes(in, dims, 4 * rank, std::to_string(rank) + " dimensions");
  Shape shape;
  bool overflow = false;
  bool has_zero = false;
  uint64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = (uint32_t{dims[4 * i]} << 24) | (uint32_t{dims[4 * i + 1]} << 16) |
                       (uint32_t{dims[4 * i + 2]} << 8) | dims[4 * i + 3];
    shape.push_back(d);
    has_zero = has_zero || d == 0;
    overflow = __builtin_mul_overflow(count, d, &count) || overflow;
  }
  if (has_zero) {  // a zero dimension empties the tensor, however large the others
    count = 0;
    overflow = false;
  }
  const std::string dims_claim = "dimensions " + shape_str(shape) + " at offset 4 claim ";
  if (overflow) in.fail(ErrorCode::kDataLoss, dims_claim + "more than 2^64 elements");
  uint64_t nbytes = 0;
  uint64_t tensor_bytes = 0;
  if (count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(count, static_cast<uint64_t>(type->width), &nbytes) ||
      __builtin_mul_overflow(count, dtype_size(type->dtype), &tensor_bytes) ||
      tensor_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    in.fail(ErrorCode::kDataLoss, dims_claim + std::to_string(count) + " elements of " +
                                      type->name + ", more than a tensor can hold");
  }
  const uint64_t data_start = in.offset();
  const std::string claim = "dimensions " + shape_str(shape) + " of " + type->name;

  // An uncompressed file's size is known: check the claim against it before allocating.
  if (auto size = in.data_size()) {
    const uint64_t available = *size - data_start;
    if (available < nbytes) fail_truncated_data(in, nbytes, data_start, available, claim);
    if (available > nbytes) {
      in.fail(ErrorCode::kDataLoss,
              std::to_string(available - nbytes) + " trailing bytes after the data, at offset " +
                  std::to_string(data_start + nbytes) + ": " + claim + " account for " +
                  std::to_string(nbytes) + " bytes of data");
    }
  }
  Tensor out = read_data_bytes(in, type->dtype, shape, nbytes, claim);
  uint8_t extra;
  if (in.read(&extra, 1) != 0) {
    in.fail(ErrorCode::kDataLoss, std::string("trailing bytes after the data, at offset ") +
                                      std::to_string(data_start + nbytes) +
                                      (in.gzip() ? " of the decompressed stream" : "") + ": " +
                                      claim + " account for " + std::to_string(nbytes) +
                                      " bytes of data");
  }
  convert_file_data(*type, out);
  return out;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  if (!t.defined()) write_fail(path, ErrorCode::kInvalidArgument, "the tensor is undefined");
  if (t.is_symbolic()) {
    write_fail(path, ErrorCode::kInvalidArgument,
               "tensor " + t.name() + " is symbolic: it has no data until its graph runs");
  }
  const IdxType* type = idx_type_of_dtype(t.dtype());
  if (!type) {
    write_fail(path, ErrorCode::kInvalidArgument,
               std::string("IDX has no element type for dtype ") + dtype_name(t.dtype()) +
                   " (it stores u8, i8, i32, f32 and f64)");
  }
  if (t.rank() < 1 || t.rank() > kMaxRank) {
    write_fail(path, ErrorCode::kInvalidArgument,
               "IDX stores tensors of rank 1 to 8, not rank " + std::to_string(t.rank()) +
                   " (shape " + shape_str(t.shape()) + ")");
  }
  std::vector<uint8_t> header = {0, 0, type->code, static_cast<uint8_t>(t.rank())};
  for (int64_t d : t.shape()) {
    if (d > std::numeric_limits<uint32_t>::max()) {
      write_fail(path, ErrorCode::kInvalidArgument,
                 "dimension " + std::to_string(d) + " of shape " + shape_str(t.shape()) +
                     " does not fit IDX's 32-bit dimensions");
    }
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<uint8_t>(d >> shift));
  }

  AtomicFile file(path);
  Sink sink(file, gzip, path);
  sink.write(header.data(), header.size());
  const auto* data = static_cast<const uint8_t*>(t.raw_data());
  const size_t width = static_cast<size_t>(type->width);
  if (width == 1) {
    sink.write(data, t.nbytes());
  } else {
    std::vector<uint8_t> chunk(kIoChunk);
    const size_t per_chunk = kIoChunk / width;
    for (size_t i = 0, n = static_cast<size_t>(t.size()); i < n; i += per_chunk) {
      const size_t count = std::min(per_chunk, n - i);
      std::memcpy(chunk.data(), data + i * width, count * width);
      host_to_big_endian(chunk.data(), count, type->width);
      sink.write(chunk.data(), count * width);
    }
  }
  sink.finish();
  file.commit();
}

}  // namespace kiln::data

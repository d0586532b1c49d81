// InputStream and OutputFile: stdio/POSIX files with zlib inflate/deflate, offsets for error
// messages, and the temp-file + fsync + rename sequence of atomic writes.
#include "src/api/io/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace kiln::io::internal {
namespace {

constexpr size_t kIoChunk = size_t{1} << 16;
constexpr size_t kReadBuffer = size_t{1} << 17;
// zlib counts in 32-bit units: hand it at most this much at a time.
constexpr size_t kMaxZlibStep = size_t{1} << 30;

std::string errno_text() { return std::strerror(errno); }

int window_bits(Compression compression) {
  return compression == Compression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
}

bool is_gzip_magic(const uint8_t* p) { return p[0] == 0x1f && p[1] == 0x8b; }

}  // namespace

const char* compression_name(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "none";
    case Compression::kGzip:
      return "gzip";
    case Compression::kZlib:
      return "zlib";
  }
  return "?";
}

Compression detect_gzip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Compression::kNone;
  uint8_t magic[2];
  const bool gzip = std::fread(magic, 1, 2, f) == 2 && is_gzip_magic(magic);
  std::fclose(f);
  return gzip ? Compression::kGzip : Compression::kNone;
}

// ---- InputStream ----

InputStream::InputStream(const std::string& path, Compression compression, std::string who)
    : path_(path), who_(std::move(who)), compression_(compression), in_(kIoChunk) {
  file_.reset(std::fopen(path.c_str(), "rb"));
  if (!file_) fail(ErrorCode::kNotFound, "cannot open the file: " + errno_text());
  // Uncompressed data is read in small pieces (a TFRecord's header, data and footer): a
  // larger buffer than stdio's default makes one read call per many records.
  if (!compressed()) std::setvbuf(file_.get(), nullptr, _IOFBF, kReadBuffer);
  struct stat st;
  if (fstat(fileno(file_.get()), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(ErrorCode::kNotFound, "is a directory, not a file");
    if (S_ISREG(st.st_mode)) file_size_ = static_cast<uint64_t>(st.st_size);
  }
  zs_.next_in = in_.data();
  if (compressed()) {
    if (inflateInit2(&zs_, window_bits(compression)) != Z_OK) {
      fail(ErrorCode::kInternal, "zlib could not start inflating");
    }
    inflating_ = true;
  }
}

InputStream::~InputStream() {
  if (inflating_) inflateEnd(&zs_);
}

void InputStream::fail(ErrorCode code, const std::string& what) const {
  throw Error(code, who_ + ": " + path_ + ": " + what);
}

std::optional<uint64_t> InputStream::remaining() const {
  if (compressed() || !file_size_) return std::nullopt;
  return *file_size_ > offset_ ? *file_size_ - offset_ : 0;
}

std::string InputStream::where(uint64_t offset) const {
  return "offset " + std::to_string(offset) + (compressed() ? " of the decompressed data" : "");
}

size_t InputStream::read(uint8_t* dst, size_t n) {
  const size_t got = compressed() ? inflate_into(dst, n) : copy_into(dst, n);
  offset_ += got;
  return got;
}

// Moves unread input to the front of the buffer and fills the rest from the file.
void InputStream::refill() {
  if (zs_.avail_in > 0 && zs_.next_in != in_.data()) {
    std::memmove(in_.data(), zs_.next_in, zs_.avail_in);
  }
  zs_.next_in = in_.data();
  const size_t n = std::fread(in_.data() + zs_.avail_in, 1, in_.size() - zs_.avail_in, file_.get());
  if (n == 0 && std::ferror(file_.get())) fail(ErrorCode::kDataLoss, "read error: " + errno_text());
  zs_.avail_in += static_cast<uInt>(n);
  file_read_ += n;
}

size_t InputStream::copy_into(uint8_t* dst, size_t n) {
  const size_t got = std::fread(dst, 1, n, file_.get());
  if (got < n && std::ferror(file_.get())) {
    fail(ErrorCode::kDataLoss,
         "read error at offset " + std::to_string(offset_ + got) + ": " + errno_text());
  }
  return got;
}

size_t InputStream::inflate_into(uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    if (zs_.avail_in == 0) refill();
    if (zs_.avail_in == 0) {
      if (at_stream_end_) return got;  // the data ends cleanly between streams
      fail(ErrorCode::kDataLoss,
           std::string("the ") + compression_name(compression_) +
               " stream is truncated: the file ends after " + std::to_string(file_read_) +
               " compressed bytes, inside the stream (after " + std::to_string(offset_ + got) +
               " bytes of decompressed data)");
    }
    if (at_stream_end_) {  // more input after a stream's end: another stream follows
      if (compression_ == Compression::kGzip) expect_gzip_member();
      inflateReset(&zs_);
      at_stream_end_ = false;
    }
    zs_.next_out = dst + got;
    zs_.avail_out = static_cast<uInt>(std::min(n - got, kMaxZlibStep));
    const uInt room = zs_.avail_out;
    const int rc = inflate(&zs_, Z_NO_FLUSH);
    got += room - zs_.avail_out;
    if (rc == Z_STREAM_END) {
      at_stream_end_ = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      fail(ErrorCode::kDataLoss,
           std::string("corrupt ") + compression_name(compression_) +
               " stream at compressed offset " + std::to_string(file_read_ - zs_.avail_in) +
               " (after " + std::to_string(offset_ + got) +
               " bytes of decompressed data): " + (zs_.msg ? zs_.msg : zError(rc)) +
               (offset_ + got == 0 ? std::string(" (is the file really ") +
                                         compression_name(compression_) + "-compressed?)"
                                   : ""));
    }
  }
  return got;
}

// After a gzip member, more input must start another member (gzip allows them back to back):
// anything else is named as garbage rather than as a corrupt stream.
void InputStream::expect_gzip_member() {
  const bool after_a_member = file_read_ > zs_.avail_in;  // not the file's first bytes
  if (!after_a_member) return;
  if (zs_.avail_in < 2) refill();
  if (zs_.avail_in < 2 || !is_gzip_magic(zs_.next_in)) {
    fail(ErrorCode::kDataLoss,
         "trailing garbage after the end of the gzip stream, at compressed offset " +
             std::to_string(file_read_ - zs_.avail_in));
  }
}

// ---- OutputFile ----

OutputFile::OutputFile(const std::string& path, Mode mode, Compression compression, std::string who)
    : path_(path), who_(std::move(who)), mode_(mode), compression_(compression) {
  if (mode_ == Mode::kAtomic) {
    temp_ = path + ".tmp-XXXXXX";
    fd_ = mkstemp(temp_.data());
    if (fd_ < 0) {
      fail(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kFailedPrecondition,
           "cannot create a temporary file next to it: " + errno_text());
    }
    fchmod(fd_, 0644);  // mkstemp makes 0600; a data file is normally world-readable
  } else {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      fail(errno == ENOENT   ? ErrorCode::kNotFound
           : errno == EEXIST ? ErrorCode::kAlreadyExists
                             : ErrorCode::kFailedPrecondition,
           "cannot create the file: " + errno_text());
    }
  }
  if (compression_ != Compression::kNone) {
    if (deflateInit2(&zs_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits(compression_), 8,
                     Z_DEFAULT_STRATEGY) != Z_OK) {
      fail(ErrorCode::kInternal, "zlib could not start deflating");
    }
    deflating_ = true;
    deflated_.resize(kIoChunk);
  }
  buffer_.reserve(kIoChunk);
}

OutputFile::~OutputFile() {
  if (deflating_) deflateEnd(&zs_);
  if (fd_ >= 0) ::close(fd_);
  if (mode_ == Mode::kAtomic && !committed_) unlink(temp_.c_str());
}

void OutputFile::fail(ErrorCode code, const std::string& what) const {
  throw Error(code, who_ + ": " + path_ + ": " + what);
}

void OutputFile::write(const void* data, size_t n) {
  if (closed()) fail(ErrorCode::kFailedPrecondition, "write after close");
  const auto* p = static_cast<const uint8_t*>(data);
  if (kill_armed_) [[unlikely]] {
    if (n >= kill_in_) write_and_die(p, kill_in_);
    kill_in_ -= n;
  }
  append(p, n);
}

void OutputFile::kill_after(uint64_t bytes) {
  if (bytes == 0) write_and_die(nullptr, 0);
  kill_armed_ = true;
  kill_in_ = bytes;
}

void OutputFile::write_and_die(const uint8_t* p, size_t n) {
  append(p, n);
  flush();
  std::raise(SIGKILL);
  std::abort();  // not reached: SIGKILL cannot be caught
}

void OutputFile::append(const uint8_t* p, size_t n) {
  if (buffer_.size() + n <= kIoChunk) {
    buffer_.insert(buffer_.end(), p, p + n);
    return;
  }
  drain();
  if (n >= kIoChunk) {  // large writes skip the buffer
    if (deflating_) {
      deflate_buffer(p, n, Z_NO_FLUSH);
    } else {
      write_fd(p, n);
    }
    return;
  }
  buffer_.insert(buffer_.end(), p, p + n);
}

// Hands the buffered bytes on: deflated, or straight to the file.
void OutputFile::drain() {
  if (buffer_.empty()) return;
  if (deflating_) {
    deflate_buffer(buffer_.data(), buffer_.size(), Z_NO_FLUSH);
  } else {
    write_fd(buffer_.data(), buffer_.size());
  }
  buffer_.clear();
}

// Runs deflate over `data` until it has taken all of it and, with Z_SYNC_FLUSH or Z_FINISH,
// emitted everything (ending the stream with Z_FINISH), writing its output to the file.
void OutputFile::deflate_buffer(const uint8_t* data, size_t n, int flush) {
  do {
    const size_t take = std::min(n, kMaxZlibStep);
    zs_.next_in = const_cast<uint8_t*>(data);
    zs_.avail_in = static_cast<uInt>(take);
    const int step_flush = take == n ? flush : Z_NO_FLUSH;
    int rc;
    do {
      zs_.next_out = deflated_.data();
      zs_.avail_out = static_cast<uInt>(deflated_.size());
      rc = deflate(&zs_, step_flush);
      if (rc == Z_STREAM_ERROR) fail(ErrorCode::kInternal, "zlib deflate failed");
      write_fd(deflated_.data(), deflated_.size() - zs_.avail_out);
    } while (step_flush == Z_FINISH ? rc != Z_STREAM_END : zs_.avail_out == 0);
    data += take;
    n -= take;
  } while (n > 0);
}

void OutputFile::write_fd(const uint8_t* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(ErrorCode::kFailedPrecondition, "write failed: " + errno_text());
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void OutputFile::flush() {
  if (closed()) return;
  drain();
  if (deflating_) deflate_buffer(nullptr, 0, Z_SYNC_FLUSH);
}

void OutputFile::close() {
  if (closed()) return;
  drain();
  if (deflating_) {
    deflate_buffer(nullptr, 0, Z_FINISH);
    deflateEnd(&zs_);
    deflating_ = false;
  }
  if (fsync(fd_) != 0) fail(ErrorCode::kFailedPrecondition, "fsync failed: " + errno_text());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(ErrorCode::kFailedPrecondition, "close failed: " + errno_text());
  if (mode_ == Mode::kAtomic) {
    if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
      fail(ErrorCode::kFailedPrecondition,
           "cannot rename the temporary file " + temp_ + " over it: " + errno_text());
    }
    committed_ = true;
  }
  // Make the new directory entry durable; a failure here loses nothing already written.
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    ::close(dfd);
  }
}

void make_directories(const std::string& dir, const std::string& who) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw Error(ErrorCode::kFailedPrecondition,
                who + ": cannot create the directory " + dir + ": " + ec.message());
  }
}

}  // namespace kiln::io::internal

// Files for kiln::io: an input stream that inflates gzip/zlib data and knows its offsets, and an
// output file that deflates, buffers, and appears atomically (temp file, fsync, rename).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/error.h"
#include "kiln/io/tfrecord.h"

namespace kiln::io::internal {

const char* compression_name(Compression compression);

// kGzip when the file at `path` starts with gzip's magic bytes (0x1f 0x8b), kNone otherwise,
// also when it cannot be read: opening it as an InputStream then says why.
Compression detect_gzip(const std::string& path);

// The bytes of a file in order: as stored, or inflated from a gzip or zlib stream (several
// streams back to back are read as one). read() returns fewer bytes than asked only at the end
// of the data. Errors throw kiln::Error "<who>: <path>: ...": kNotFound when the file cannot be
// opened, kDataLoss for a read error, a corrupt or truncated compressed stream, or bytes after
// a gzip stream's end that do not start another gzip member.
class InputStream {
 public:
  InputStream(const std::string& path, Compression compression, std::string who);
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  size_t read(uint8_t* dst, size_t n);

  // Bytes handed out so far: the offset in the file, or in the decompressed data.
  uint64_t offset() const { return offset_; }
  // Bytes left, when known without reading them: an uncompressed regular file.
  std::optional<uint64_t> remaining() const;
  bool compressed() const { return compression_ != Compression::kNone; }
  // "offset 12" or "offset 12 of the decompressed data", for messages.
  std::string where(uint64_t offset) const;

  [[noreturn]] void fail(ErrorCode code, const std::string& what) const;

 private:
  void refill();
  size_t copy_into(uint8_t* dst, size_t n);
  size_t inflate_into(uint8_t* dst, size_t n);
  void expect_gzip_member();

  std::string path_;
  std::string who_;
  Compression compression_;
  struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::optional<uint64_t> file_size_;
  std::vector<uint8_t> in_;  // file bytes not yet consumed: next_in / avail_in of zs_
  z_stream zs_{};
  bool inflating_ = false;
  bool at_stream_end_ = true;  // between streams: more input starts another
  uint64_t file_read_ = 0;     // bytes read from the file
  uint64_t offset_ = 0;        // bytes handed out by read()
};

// A file written through a buffer, optionally deflated (gzip or zlib). Atomic mode writes a
// temporary file in the target's directory and close() syncs it and renames it over `path`
// (then syncs the directory), so readers see the old file or the complete new one; destroying
// an atomic file before close() removes the temporary file. Direct mode creates `path` (which
// must not exist yet) and flush() makes the data written so far visible to readers.
class OutputFile {
 public:
  enum class Mode { kAtomic, kDirect };
  OutputFile(const std::string& path, Mode mode, Compression compression, std::string who);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n);
  void flush();  // direct mode: hand buffered bytes (and a deflate sync point) to the OS
  void close();  // finish the stream, fsync; atomic mode: rename into place
  bool closed() const { return fd_ < 0; }
  const std::string& path() const { return path_; }

  // The fault hook of checkpoint saves, for kill tests: once `bytes` more bytes have been
  // written, hand them to the OS and SIGKILL the process, leaving the file partly written
  // (at once when `bytes` is 0).
  void kill_after(uint64_t bytes);

  [[noreturn]] void fail(ErrorCode code, const std::string& what) const;

 private:
  void append(const uint8_t* data, size_t n);
  [[noreturn]] void write_and_die(const uint8_t* data, size_t n);
  void deflate_buffer(const uint8_t* data, size_t n, int flush);
  void write_fd(const uint8_t* data, size_t n);
  void drain();

  std::string path_;
  std::string temp_;  // atomic mode
  std::string who_;
  Mode mode_;
  Compression compression_;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<uint8_t> buffer_;  // bytes not yet written (compressed when compressing)
  std::vector<uint8_t> deflated_;
  z_stream zs_{};
  bool deflating_ = false;
  bool kill_armed_ = false;
  uint64_t kill_in_ = 0;  // bytes until the fault hook fires
};

// Appends one TFRecord-framed record to `file` (defined in tfrecord.cc).
void write_record(OutputFile& file, std::string_view data);

// Creates `dir` and its missing parents; throws kFailedPrecondition naming it.
void make_directories(const std::string& dir, const std::string& who);

}  // namespace kiln::io::internal

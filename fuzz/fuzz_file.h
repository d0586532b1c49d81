// Files for the fuzz targets: the readers under test take paths, so each input is written to an
// in-memory file (memfd, opened through /proc/self/fd) or into a scratch directory; and the
// input formats' small pieces (length-prefixed parts, TFRecord framing).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "src/api/io/crc32c.h"

namespace kiln::fuzz {

// With KILN_FUZZ_VERBOSE set, prints why an input was rejected (to check that seeds load).
inline void note(const std::exception& e) {
  static const bool verbose = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
}

// Fails the run (libFuzzer reports a crash and saves the input) when an invariant is broken.
inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

class MemoryFile {
 public:
  MemoryFile() : fd_(memfd_create("kiln_fuzz_input", 0)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { close(fd_); }

  // Replaces the file's contents; returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    for (size_t done = 0; done < size;) {
      ssize_t n = pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// A directory of this process (on tmpfs when there is one), emptied for every input.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    path_ = std::string(base) + "/kiln_fuzz_" + std::to_string(getpid());
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& reset() {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
    return path_;
  }
  std::string write(const std::string& relative, std::string_view bytes) const {
    const std::filesystem::path p = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }

 private:
  std::string path_;
};

// Splits an input into parts: part() takes a 2-byte little-endian length and that many bytes
// (fewer at the end of the input); rest() takes what is left.
class Parts {
 public:
  Parts(const uint8_t* data, size_t size) : data_(reinterpret_cast<const char*>(data), size) {}
  std::string_view part() {
    if (data_.size() < 2) return take(data_.size());
    const size_t n = static_cast<uint8_t>(data_[0]) | static_cast<uint8_t>(data_[1]) << 8;
    data_.remove_prefix(2);
    return take(std::min(n, data_.size()));
  }
  std::string_view rest() { return take(data_.size()); }

 private:
  std::string_view take(size_t n) {
    std::string_view out = data_.substr(0, n);
    data_.remove_prefix(n);
    return out;
  }
  std::string_view data_;
};

// One TFRecord-framed record, as RecordWriter writes it.
inline std::string tfrecord(std::string_view record) {
  auto le = [](std::string& out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  };
  std::string header;
  le(header, record.size(), 8);
  le(header, io::crc32c::mask(io::crc32c::value(header)), 4);
  std::string out = header;
  out.append(record);
  le(out, io::crc32c::mask(io::crc32c::value(record)), 4);
  return out;
}

// A file name the harness may create inside its directory for a name taken from the input.
inline bool safe_file_name(const std::string& name) {
  return !name.empty() && name.size() < 100 && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos && name != "." && name != "..";
}

}  // namespace kiln::fuzz

// The fuzz targets' input file: the readers under test take a path, so each input is written to
// an in-memory file (memfd) that they open through /proc/self/fd.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace kiln::fuzz {

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

// Fails the run (libFuzzer reports a crash and saves the input) when an invariant is broken.
inline void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace kiln::fuzz

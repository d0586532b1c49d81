// check_writable, shared by the callbacks that write files (ModelCheckpoint, BackupAndRestore,
// TensorBoard).
#include "src/api/nn/writable_dir.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::nn::detail {

void check_writable(const std::string& dir, const char* who) {
  static std::atomic<int> probes{0};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string why = ec ? ec.message() : "";
  if (!ec) {
    const std::filesystem::path probe =
        std::filesystem::path(dir) /
        (".kiln-write-probe-" + std::to_string(getpid()) + "-" + std::to_string(probes++));
    if (std::FILE* f = std::fopen(probe.c_str(), "wb")) {
      std::fclose(f);
      std::filesystem::remove(probe, ec);
      return;
    }
    why = std::strerror(errno);
  }
  throw Error(ErrorCode::kFailedPrecondition,
              std::string(who) + ": cannot write to " + dir + ": " + why +
                  " (pass a directory that can be created and written)");
}

}  // namespace kiln::nn::detail

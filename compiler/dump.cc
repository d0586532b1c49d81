// The KILN_DUMP directories: one per compile, and the one the current thread writes into.
#include "compiler/dump.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "kiln/error.h"

namespace kiln::compiler {
namespace {

thread_local std::string t_dump_dir;

constexpr size_t kMaxNameChars = 120;  // file names stay far below NAME_MAX
constexpr size_t kMaxSignatureTypes = 4;

std::string sanitized(std::string_view s) {
  std::string out(s.substr(0, kMaxNameChars));
  for (char& c : out) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ||
                      c == '.' || c == '[' || c == ']' || c == ',';
    if (!keep) c = '_';
  }
  return out;
}

}  // namespace

const std::string& current_dump_dir() { return t_dump_dir; }

std::string new_dump_dir(std::string_view name, std::string_view signature) {
  const char* root = std::getenv("KILN_DUMP");
  if (!root || !*root) return "";
  static std::atomic<int64_t> counter{0};
  std::string base = sanitized(name.empty() ? "graph" : name);
  if (!signature.empty()) base.append("_").append(sanitized(signature));
  std::error_code error;
  std::filesystem::create_directories(root, error);
  for (;;) {
    const std::filesystem::path dir =
        std::filesystem::path(root) / (base + "_" + std::to_string(counter++));
    if (!error && std::filesystem::create_directory(dir, error)) return dir.string();
    if (error) {
      throw Error(ErrorCode::kFailedPrecondition,
                  "KILN_DUMP: cannot create '" + dir.string() + "': " + error.message());
    }
  }
}

std::string dump_dir_for(std::string_view name) {
  return t_dump_dir.empty() ? new_dump_dir(name) : t_dump_dir;
}

DumpScope::DumpScope(std::string dir) : saved_(std::exchange(t_dump_dir, std::move(dir))) {}
DumpScope::~DumpScope() { t_dump_dir = std::move(saved_); }

std::string dump_signature(const FeedList& feeds) {
  auto open = [](const Tensor& placeholder) {
    for (int64_t d : placeholder.shape())
      if (d == kUnknownDim) return true;
    return false;
  };
  bool any_open = false;
  for (const auto& [key, value] : feeds) any_open |= open(key);
  std::string out;
  size_t named = 0, rest = 0;
  for (const auto& [key, value] : feeds) {
    if (any_open && !open(key)) continue;
    if (named == kMaxSignatureTypes) {
      ++rest;
      continue;
    }
    out += (named++ ? "_" : "") + TensorType{value.dtype(), value.shape()}.str();
  }
  if (rest > 0) out += "_+" + std::to_string(rest);
  return out;
}

}  // namespace kiln::compiler

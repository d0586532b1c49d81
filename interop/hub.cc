// kiln::hub: handles to local paths, then an ONNX import or a saved model's signature.
#include "kiln/hub.h"

#include <cstdlib>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::hub {
namespace fs = std::filesystem;
namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// A relative path made of plain names: no "..", no root, nothing empty.
bool plain_relative(const std::string& path) {
  if (path.empty() || path[0] == '/') return false;
  for (const auto& part : fs::path(path)) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

}  // namespace

std::string cache_dir() {
  if (const char* dir = std::getenv("KILN_HUB_CACHE"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return (fs::path(xdg) / "kiln" / "hub").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/tmp") / ".cache" / "kiln" / "hub").string();
}

std::string resolve(const std::string& handle) {
  if (handle.empty()) throw Error(ErrorCode::kInvalidArgument, "hub::resolve: an empty handle");
  if (starts_with(handle, "file://")) {
    const std::string path = handle.substr(7);
    if (!fs::exists(path))
      throw Error(ErrorCode::kNotFound, "hub::resolve: " + handle + ": " + path + " does not exist");
    return path;
  }
  const std::string cache = cache_dir();
  for (const char* scheme : {"https://", "http://"}) {
    if (!starts_with(handle, scheme)) continue;
    std::string rest = handle.substr(std::string(scheme).size());
    if (const size_t q = rest.find_first_of("?#"); q != std::string::npos) rest.resize(q);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    if (!plain_relative(rest))
      throw Error(ErrorCode::kInvalidArgument, "hub::resolve: " + handle + ": not a model URL");
    const fs::path local = fs::path(cache) / rest;
    if (fs::exists(local)) return local.string();
    throw Error(ErrorCode::kUnimplemented,
                "hub::resolve: " + handle + " is not in the cache, and this build of Kiln does "
                "not download: fetch it yourself to " + local.string() +
                " (or set KILN_HUB_CACHE), or pass a local path or file:// handle");
  }
  if (handle.find("://") != std::string::npos)
    throw Error(ErrorCode::kInvalidArgument, "hub::resolve: " + handle + ": unknown scheme");
  if (fs::exists(handle)) return handle;
  if (plain_relative(handle)) {
    const fs::path local = fs::path(cache) / handle;
    if (fs::exists(local)) return local.string();
    throw Error(ErrorCode::kNotFound, "hub::resolve: " + handle + ": neither a path nor in the "
                                      "cache (" + local.string() + ")");
  }
  throw Error(ErrorCode::kNotFound, "hub::resolve: " + handle + " does not exist");
}

io::ExportedGraph load(const std::string& handle, const onnx::ImportOptions& options) {
  const std::string path = resolve(handle);
  if (fs::is_directory(path)) return io::load_model(path).exported();
  return onnx::import_model(path, options).graph();
}

std::shared_ptr<nn::GraphLayer> layer(const std::string& handle, bool trainable,
                                      const onnx::ImportOptions& options,
                                      const std::string& name) {
  onnx::ImportOptions o = options;
  o.initializers_as_variables = true;
  std::string layer_name = name;
  if (layer_name.empty()) {
    fs::path p(handle);
    while (!p.empty() && p.filename().empty()) p = p.parent_path();
    layer_name = p.stem().string();
    // A versioned directory ("extractor/1") is named after the model, not the version.
    if (!layer_name.empty() && layer_name.find_first_not_of("0123456789") == std::string::npos)
      layer_name = p.parent_path().filename().string();
    if (layer_name.empty()) layer_name = "hub_layer";
  }
  return std::make_shared<nn::GraphLayer>(load(handle, o), trainable, layer_name);
}

}  // namespace kiln::hub

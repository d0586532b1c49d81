// kiln-inspect: prints what an exported model (signatures, op counts, variables and parameter
// counts) or a checkpoint (tensors with dtype, shape and CRC, metadata) holds.
//   kiln-inspect <saved_model_dir | version_dir | checkpoint prefix, .index or directory>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <string>

#include "kiln/io/checkpoint.h"
#include "kiln/io/saved_model.h"

namespace {

namespace fs = std::filesystem;

bool looks_like_saved_model(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  if (fs::exists(fs::path(path) / "saved_model.pb", ec)) return true;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (fs::exists(it->path() / "saved_model.pb", ec)) return true;
  }
  return false;
}

void print_saved_model(const std::string& path) {
  const kiln::io::SavedModelInfo info = kiln::io::describe_saved_model(path);
  std::printf("saved model: %s (version %" PRId64 ", model '%s', written by Kiln %s)\n",
              info.path.c_str(), info.version, info.model_name.c_str(), info.kiln_version.c_str());
  for (const auto& [name, sig] : info.signatures) {
    std::printf("signature '%s':\n", name.c_str());
    for (const auto& [in, type] : sig.inputs)
      std::printf("  input  %s: %s\n", in.c_str(), type.str().c_str());
    for (const auto& [out, type] : sig.outputs)
      std::printf("  output %s: %s\n", out.c_str(), type.str().c_str());
  }
  std::printf("ops (%" PRId64 " nodes):\n", info.num_nodes);
  for (const auto& [op, count] : info.op_counts)
    std::printf("  %-28s %" PRId64 "\n", op.c_str(), count);
  std::printf("variables (%zu):\n", info.variables.size());
  for (const auto& v : info.variables) {
    std::printf("  %-28s %s%-14s %" PRId64 "\n", v.name.c_str(), kiln::dtype_name(v.dtype),
                kiln::shape_str(v.shape).c_str(), kiln::num_elements(v.shape));
  }
  std::printf("parameters: %" PRId64 "\n", info.num_parameters);
}

void print_checkpoint(const std::string& path) {
  const kiln::io::CheckpointIndex index = kiln::io::read_checkpoint_index(path);
  std::printf("checkpoint: %s (data %s, %" PRIu64 " bytes)\n", index.prefix.c_str(),
              index.data_path.c_str(), index.data_size);
  std::printf("metadata:\n");
  for (const auto& [key, value] : index.metadata) {
    if (const auto* i = std::get_if<int64_t>(&value)) {
      std::printf("  %s = %" PRId64 "\n", key.c_str(), *i);
    } else {
      std::printf("  %s = \"%s\"\n", key.c_str(), std::get<std::string>(value).c_str());
    }
  }
  int64_t elements = 0;
  std::printf("tensors (%zu):\n", index.entries.size());
  for (const auto& e : index.entries) {
    elements += kiln::num_elements(e.shape);
    std::printf("  %-28s %s%-14s crc32c=%08x offset=%" PRIu64 " length=%" PRIu64 "\n",
                e.name.c_str(), kiln::dtype_name(e.dtype), kiln::shape_str(e.shape).c_str(),
                e.crc32c, e.offset, e.length);
  }
  kiln::io::load_checkpoint(index.prefix);  // reads every tensor and checks its CRC
  std::printf("elements: %" PRId64 "; every CRC-32C verified\n", elements);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: kiln-inspect <saved_model_dir | checkpoint>\n"
                 "  A saved model directory (or one version of it): signatures, op counts,\n"
                 "  variables and parameter counts. A checkpoint (prefix, .index file, or a\n"
                 "  directory with a 'checkpoint' pointer file): tensors and metadata.\n");
    return 2;
  }
  const std::string path = argv[1];
  try {
    if (looks_like_saved_model(path)) {
      print_saved_model(path);
    } else {
      print_checkpoint(path);
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-inspect: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

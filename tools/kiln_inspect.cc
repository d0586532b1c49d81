// kiln-inspect: prints what a whole model (layers, parameters, optimizer, inputs and
// outputs), an exported model (signatures, op counts, variables and parameter counts) or a
// checkpoint (tensors with dtype, shape and CRC, metadata) holds.
//   kiln-inspect <model.kiln | saved_model_dir | version_dir | checkpoint prefix, .index,
//                 data file or directory>
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <string>
#include <variant>
#include <vector>

#include "kiln/io/checkpoint.h"
#include "kiln/io/saved_model.h"
#include "kiln/nn/saving.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: kiln-inspect <path>\n"
    "  A whole model (a file Model::save wrote, e.g. model.kiln): its layers with their output\n"
    "  types and parameter counts, inputs and outputs, optimizer and compile settings.\n"
    "  A saved model directory (or one version of it): signatures, op counts, variables and\n"
    "  parameter counts. A checkpoint (prefix, .index or data file, or a directory with a\n"
    "  'checkpoint' pointer file): tensors and metadata, every CRC checked.\n"
    "options:\n"
    "  -h, --help  print this and exit\n";

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

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

// A whole model, as Keras' model.summary() shows it, then how it was compiled.
void print_whole_model(const std::string& path) {
  const kiln::nn::ModelFileInfo info = kiln::nn::describe_model_file(path);
  std::printf("model: %s ('%s' (%s), written by Kiln %s, %" PRId64 " tensors)\n", info.path.c_str(),
              info.model_name.c_str(), info.functional ? "functional" : "Sequential",
              info.kiln_version.c_str(), info.tensor_records);
  if (info.inputs.empty()) std::printf("not built: saved before its input shape was known\n");
  for (const auto& [name, type] : info.inputs)
    std::printf("  input  %s: %s\n", name.c_str(), type.str().c_str());
  for (const auto& [name, type] : info.outputs)
    std::printf("  output %s: %s\n", name.c_str(), type.str().c_str());

  std::vector<std::array<std::string, 4>> rows = {{"Layer (type)", "Output", "Param #", ""}};
  for (const auto& l : info.layers) {
    rows.push_back({l.name + " (" + l.class_name + ")", l.output ? l.output->str() : "?",
                    std::to_string(l.params), l.dtype_policy == "float32" ? "" : l.dtype_policy});
  }
  for (const auto& l : info.layers)
    if (l.dtype_policy != "float32") rows[0][3] = "Policy";
  std::array<size_t, 3> width{};
  for (const auto& row : rows)
    for (size_t c = 0; c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::printf("layers (%zu):\n", info.layers.size());
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t c = 0; c < width.size(); ++c)
      line += row[c] + std::string(width[c] + 2 - row[c].size(), ' ');
    line += row[3];
    line.erase(line.find_last_not_of(' ') + 1);
    std::printf("%s\n", line.c_str());
  }
  std::printf("parameters: %" PRId64 " (trainable %" PRId64 ", non-trainable %" PRId64 ")\n",
              info.params, info.trainable_params, info.params - info.trainable_params);

  if (info.optimizer.empty()) {
    std::printf("not compiled\n");
    return;
  }
  std::printf("optimizer: %s (%" PRId64 " iterations)\n", info.optimizer.c_str(), info.iterations);
  // A learning-rate schedule is a name plus "learning_rate.<argument>" entries: one line,
  // "learning_rate = exponential_decay(decay_rate=0.9, ...)".
  struct Entry {
    std::string key, text, name;
    std::vector<std::string> args;
  };
  std::vector<Entry> entries;
  for (const auto& [key, value] : info.optimizer_config.values()) {
    const std::string text = kiln::Attrs{{key, value}}.str().substr(key.size() + 1);
    const size_t dot = key.find('.');
    if (dot != std::string::npos && !entries.empty() && entries.back().key == key.substr(0, dot)) {
      entries.back().args.push_back(key.substr(dot + 1) + "=" + text);
      continue;
    }
    const auto* name = std::get_if<std::string>(&value);
    entries.push_back({key, text, name ? *name : "", {}});
  }
  size_t key_width = 0;
  for (const Entry& e : entries) key_width = std::max(key_width, e.key.size());
  for (const Entry& e : entries) {
    std::string text = e.text;
    if (!e.args.empty()) {
      text = e.name + "(";
      for (size_t i = 0; i < e.args.size(); ++i) text += (i ? ", " : "") + e.args[i];
      text += ")";
    }
    std::printf("  %-*s = %s\n", static_cast<int>(key_width), e.key.c_str(), text.c_str());
  }
  for (size_t i = 0; i < info.losses.size(); ++i) {
    const auto& [name, config] = info.losses[i];
    std::string line = "loss";
    if (info.losses.size() > 1) line += " " + std::to_string(i);
    if (info.losses.size() > 1 && i < info.loss_weights.size())
      line += " (weight " + kiln::Attrs{{"w", info.loss_weights[i]}}.str().substr(2) + ")";
    line += ": " + name;
    if (!config.values().empty()) line += " (" + config.str() + ")";
    std::printf("%s\n", line.c_str());
  }
  std::string metrics;
  for (const std::string& m : info.metrics) metrics += (metrics.empty() ? "" : ", ") + m;
  std::printf("metrics: %s\n", metrics.empty() ? "none" : metrics.c_str());
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
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      std::fprintf(stderr, "kiln-inspect: error: unknown option '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
    paths.push_back(arg);
  }
  if (paths.size() != 1) {
    std::fprintf(stderr, "kiln-inspect: error: expected one path, got %zu\n%s", paths.size(),
                 kUsage);
    return 2;
  }
  const std::string path = paths[0];
  try {
    std::error_code ec;
    const bool file = fs::is_regular_file(path, ec);
    const size_t data = path.rfind(".data-");
    if (looks_like_saved_model(path)) {
      print_saved_model(path);
    } else if (file && data != std::string::npos) {
      print_checkpoint(path.substr(0, data));  // a checkpoint's data file
    } else if ((file && !ends_with(path, ".index")) || ends_with(path, ".kiln")) {
      print_whole_model(path);  // says what the file is when it is not a model
    } else {
      print_checkpoint(path);
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-inspect: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Telling Kiln's files apart: checkpoint files by their names, the others by their first
// record, which each format's message must parse as exactly (no field left unknown).
#include "src/api/io/file_kind.h"

#include <google/protobuf/message.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "kiln/error.h"
#include "kiln/io/tfrecord.h"
#include "src/api/io/crc32c.h"
#include "src/api/io/proto/checkpoint.pb.h"
#include "src/api/io/proto/event.pb.h"
#include "src/api/io/proto/example.pb.h"
#include "src/api/io/proto/saved_model.pb.h"
#include "src/api/io/proto/whole_model.pb.h"

namespace kiln::io::internal {
namespace {

namespace fs = std::filesystem;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr const char* kGraphFile = "saved_model.pb";

bool ends_with(std::string_view s, std::string_view end) {
  return s.size() >= end.size() && s.substr(s.size() - end.size()) == end;
}

// A protobuf parses almost any bytes as almost any message, putting what does not fit into
// unknown fields: a record is a `T` only if every field of it (and of its parts) is T's.
bool no_unknown_fields(const Message& m) {
  const google::protobuf::Reflection* r = m.GetReflection();
  if (!r->GetUnknownFields(m).empty()) return false;
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (!f->is_repeated()) {
      if (!no_unknown_fields(r->GetMessage(m, f))) return false;
      continue;
    }
    for (int i = 0; i < r->FieldSize(m, f); ++i)
      if (!no_unknown_fields(r->GetRepeatedMessage(m, f, i))) return false;
  }
  return true;
}

template <typename T>
bool parses_exactly(std::string_view record, T& out) {
  return out.ParseFromArray(record.data(), static_cast<int>(record.size())) &&
         no_unknown_fields(out);
}

// "0.1.0": what save_model writes as kiln_version.
bool looks_like_version(const std::string& v) {
  return !v.empty() && v.size() < 64 && v[0] >= '0' && v[0] <= '9' &&
         std::all_of(v.begin(), v.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' ||
                  c == '_';
         });
}

// "<prefix>.data-<16 hex digits>"; the prefix, or "" for another name.
std::string data_file_prefix(const std::string& path) {
  const size_t at = path.rfind(".data-");
  if (at == std::string::npos || path.size() != at + 6 + 16) return "";
  const std::string hex = path.substr(at + 6);
  if (!std::all_of(hex.begin(), hex.end(), [](char c) { return std::isxdigit(c); })) return "";
  return path.substr(0, at);
}

bool is_exported_model_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / kGraphFile, ec)) return true;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() &&
        std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        fs::exists(it->path() / kGraphFile, ec))
      return true;
  }
  return false;
}

bool holds_checkpoints(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (ends_with(it->path().filename().string(), ".index")) return true;
  return false;
}

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

FileKind record_kind(std::string_view record) {
  if (proto::CheckpointIndex index; parses_exactly(record, index) && index.format_version() > 0 &&
                                    !data_file_prefix(index.data_file()).empty()) {
    return FileKind::kCheckpointIndex;
  }
  if (proto::saved::SavedModel graph;
      parses_exactly(record, graph) && graph.format_version() > 0 && graph.signatures_size() > 0) {
    return FileKind::kExportedGraph;
  }
  // Not exactly: a model written by a later Kiln may hold fields this one does not know.
  if (proto::saved::ModelDef model;
      model.ParseFromArray(record.data(), static_cast<int>(record.size())) &&
      model.format_version() > 0 && looks_like_version(model.kiln_version())) {
    return FileKind::kWholeModel;
  }
  if (proto::Event event;
      parses_exactly(record, event) && event.file_version().rfind("brain.Event:", 0) == 0) {
    return FileKind::kEventFile;
  }
  if (proto::Example example;
      parses_exactly(record, example) && example.features().feature_size() > 0) {
    return FileKind::kExamples;
  }
  return FileKind::kRecords;
}

FileKind file_kind(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    return fs::exists(path + ".index", ec) ? FileKind::kCheckpointPrefix : FileKind::kMissing;
  }
  if (fs::is_directory(status)) {
    if (is_exported_model_dir(path)) return FileKind::kExportedModel;
    if (holds_checkpoints(path)) return FileKind::kCheckpointDir;
    return FileKind::kDirectory;
  }
  // A data file is raw tensor bytes: only its name tells.
  if (!data_file_prefix(path).empty()) return FileKind::kCheckpointData;

  char head[21] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {  // unreadable (permissions): not to be taken for an empty file
    throw Error(ErrorCode::kNotFound, path + ": cannot open the file: " +
                                          std::error_code(errno, std::generic_category()).message());
  }
  in.read(head, sizeof head);
  const std::string_view start(head, static_cast<size_t>(in.gcount()));
  if (start.empty()) return FileKind::kEmpty;
  if (start.size() >= 2 && static_cast<uint8_t>(start[0]) == 0x1f &&
      static_cast<uint8_t>(start[1]) == 0x8b) {
    return FileKind::kGzip;
  }
  if (fs::path(path).filename() == "checkpoint" && start.rfind("model_checkpoint_path", 0) == 0) {
    return FileKind::kCheckpointPointer;
  }
  // A TFRecord starts with its length and the masked CRC-32C of those 8 bytes.
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(start[i])); };
  if (start.size() < 12 || crc32c::mask(crc32c::value(start.data(), 8)) !=
                               (byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24)) {
    return FileKind::kNotRecords;
  }
  RecordReader reader(path);
  std::string record;
  reader.next(record);
  return record_kind(record);
}

void wrong_kind(const std::string& who, const std::string& path, FileKind kind,
                const std::string& expected) {
  const std::string is = who + ": " + path + " is ";
  const std::string not_expected = ", not " + expected;
  auto invalid = [](const std::string& message) -> Error {
    return Error(ErrorCode::kInvalidArgument, message);
  };
  auto restore_with = [](const std::string& prefix) {
    return "; restore it with io::load_checkpoint(" + quoted(prefix) +
           ") (a model built in code takes its tensors with Model::load_state)";
  };
  switch (kind) {
    case FileKind::kMissing:
      throw Error(ErrorCode::kNotFound, who + ": " + path + " does not exist");
    case FileKind::kDirectory:
      throw invalid(is + "a directory" + not_expected);
    case FileKind::kEmpty:
      throw Error(ErrorCode::kDataLoss, is + "empty" + not_expected);
    case FileKind::kGzip:
      throw invalid(is + "gzip-compressed" + not_expected +
                    " (Kiln writes its files uncompressed; gunzip it first)");
    case FileKind::kNotRecords:
      throw Error(ErrorCode::kDataLoss, who + ": " + path + " is not " + expected +
                                            ", or is damaged: it is not a TFRecord file (its " +
                                            "first 12 bytes are not a record's length and CRC)");
    case FileKind::kRecords:
      throw invalid(is + "a TFRecord file whose first record (at offset 0) is not " + expected);
    case FileKind::kExamples:
      throw invalid(is + "a TFRecord file of tf.train.Example records" + not_expected +
                    "; read it with data::Dataset::tfrecord and parse_example");
    case FileKind::kEventFile:
      throw invalid(is + "a TensorBoard event file" + not_expected +
                    "; view it with tensorboard --logdir " + parent_of(path));
    case FileKind::kWholeModel:
      throw invalid(is + "a Kiln model (.kiln)" + not_expected + "; load it with nn::load_model(" +
                    quoted(path) + ")");
    case FileKind::kExportedModel:
      throw invalid(is + "an exported model" + not_expected + "; load it with io::load_model(" +
                    quoted(path) + ")");
    case FileKind::kExportedGraph:
      throw invalid(is + "an exported model's graph" + not_expected +
                    "; load its directory with io::load_model(" + quoted(parent_of(path)) + ")");
    case FileKind::kCheckpointIndex: {
      const std::string prefix = ends_with(path, ".index") ? path.substr(0, path.size() - 6) : path;
      throw invalid(is + "a checkpoint index" + not_expected + restore_with(prefix));
    }
    case FileKind::kCheckpointPrefix:
      throw invalid(is + "a checkpoint (" + path + ".index and its data file)" + not_expected +
                    restore_with(path));
    case FileKind::kCheckpointData:
      throw invalid(is + "a checkpoint data file" + not_expected +
                    restore_with(data_file_prefix(path)));
    case FileKind::kCheckpointDir:
      throw invalid(is + "a checkpoint directory" + not_expected +
                    "; restore its latest checkpoint with io::load_checkpoint(" + quoted(path) +
                    ") (a model built in code takes its tensors with Model::load_state)");
    case FileKind::kCheckpointPointer:
      throw invalid(is + "the pointer file of a checkpoint directory" + not_expected +
                    "; restore its latest checkpoint with io::load_checkpoint(" +
                    quoted(parent_of(path)) + ")");
  }
  throw invalid(is + "not " + expected);
}

}  // namespace kiln::io::internal

// Checkpoint files: the atomic save sequence (data file, then the index as commit point), the
// checked load (every offset, length and CRC), the pointer file and CheckpointManager.
#include "kiln/io/checkpoint.h"

#include <fcntl.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "src/api/io/crc32c.h"
#include "src/api/io/file_io.h"
#include "src/api/io/file_kind.h"
#include "src/api/io/proto/checkpoint.pb.h"
#include "src/api/io/tensor_codec.h"

namespace kiln::io {
namespace fs = std::filesystem;
namespace {

constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kAlign = 64;
constexpr const char* kPointerFile = "checkpoint";
constexpr uint64_t kMaxPointerBytes = 1 << 20;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

std::string dir_of(const std::string& prefix) {
  fs::path parent = fs::path(prefix).parent_path();
  return parent.empty() ? "." : parent.string();
}
std::string base_of(const std::string& prefix) { return fs::path(prefix).filename().string(); }

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}
bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// A checkpoint prefix from "dir/", an existing directory, or a prefix.
std::string save_prefix(const std::string& path) {
  if (path.empty()) fail(ErrorCode::kInvalidArgument, "save_checkpoint: the path is empty");
  if (path.back() == '/' || is_directory(path)) {
    return (fs::path(path) / "ckpt").string();
  }
  return path;
}

std::string random_hex16() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  uint64_t v = (uint64_t{rd()} << 32) ^ rd() ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull) ^
               static_cast<uint64_t>(getpid());
  char s[20];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

// The fault hook, for kill tests. KILN_FAULT_KILL_DURING_SAVE=<n>[:<stage>] SIGKILLs the process
// at <stage> of the n-th save it makes while the variable is set (counting from 1; a
// CheckpointManager save is one save). The stages, in the order a save passes them:
enum class SaveStage {
  kDataPartial,     // half of the data file written to its temp file (the default stage)
  kDataWritten,     // all of it written, not yet renamed
  kDataRenamed,     // the data file in place, no index names it yet
  kIndexPartial,    // half of the index record written to the index's temp file
  kIndexWritten,    // all of it written, not yet renamed
  kIndexRenamed,    // the index renamed over the old one: the commit point
  kStaleRemoved,    // this prefix's older data files and temp files removed: save_checkpoint done
  kPointerPartial,  // CheckpointManager only: half of the pointer file's temp file written
  kPointerWritten,  // all of it written, not yet renamed
  kPointerRenamed,  // the pointer names the new checkpoint; dropped ones not yet removed
  kOldRemoved,      // checkpoints beyond max_to_keep removed: the manager's save done
};
constexpr const char* kStageNames[] = {"data_partial",    "data_written",    "data_renamed",
                                       "index_partial",   "index_written",   "index_renamed",
                                       "stale_removed",   "pointer_partial", "pointer_written",
                                       "pointer_renamed", "old_removed"};

// The hook's state for one save. The variable is read once per save (one getenv beside the
// save's fsyncs), so a test process can set it in a forked child.
class SaveFault {
 public:
  static SaveFault for_next_save() {
    const char* env = std::getenv("KILN_FAULT_KILL_DURING_SAVE");
    if (!env || !*env) return {};
    static std::atomic<int64_t> saves{0};
    const std::string spec = env;
    const size_t colon = spec.find(':');
    const int64_t n = std::strtoll(spec.c_str(), nullptr, 10);
    SaveFault fault;
    fault.stage_ =
        parse_stage(colon == std::string::npos ? "data_partial" : spec.substr(colon + 1));
    fault.armed_ = n == saves.fetch_add(1) + 1;
    return fault;
  }

  // Dies here if this save is armed for `stage`.
  void at(SaveStage stage) const {
    if (armed_ && stage == stage_) std::raise(SIGKILL);
  }
  // Arms `file` to die halfway through its `size` bytes if this save is armed for `stage`.
  void partway(SaveStage stage, internal::OutputFile& file, uint64_t size) const {
    if (armed_ && stage == stage_) file.kill_after(size / 2);
  }
  // For a file's last stage before its rename: its bytes reach the OS, then the hook may fire.
  void before_rename(SaveStage stage, internal::OutputFile& file) const {
    if (!armed_ || stage != stage_) return;
    file.flush();
    std::raise(SIGKILL);
  }

 private:
  static SaveStage parse_stage(const std::string& name) {
    std::string all;
    for (size_t i = 0; i < std::size(kStageNames); ++i) {
      if (name == kStageNames[i]) return static_cast<SaveStage>(i);
      all += (i ? ", " : "") + std::string(kStageNames[i]);
    }
    fail(ErrorCode::kInvalidArgument,
         "KILN_FAULT_KILL_DURING_SAVE: unknown stage '" + name + "' (stages: " + all + ")");
  }

  bool armed_ = false;
  SaveStage stage_ = SaveStage::kDataPartial;
};

// The fault state of the CheckpointManager save in progress on this thread, for write_pointer.
thread_local const SaveFault* manager_save_fault = nullptr;

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Removes files of earlier or interrupted saves of `prefix`: data files other than `keep`, and
// temp files of the index.
void remove_stale_files(const std::string& prefix, const std::string& keep) {
  const std::string dir = dir_of(prefix), base = base_of(prefix);
  const std::string data_start = base + ".data-", index_temp_start = base + ".index.tmp-";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == keep) continue;
    if (name.rfind(data_start, 0) == 0 || name.rfind(index_temp_start, 0) == 0) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);
  ::close(fd);
}

Metadata metadata_from_proto(const proto::CheckpointIndex& index) {
  Metadata out;
  for (const proto::MetadataEntry& e : index.metadata()) {
    if (e.value_case() == proto::MetadataEntry::kI) {
      out[e.key()] = static_cast<int64_t>(e.i());
    } else {
      out[e.key()] = e.s();
    }
  }
  return out;
}

// "prefix" from "prefix", "prefix.index" or a directory.
std::string load_prefix(const std::string& path, const char* who) {
  if (path.empty()) fail(ErrorCode::kInvalidArgument, std::string(who) + ": the path is empty");
  if (is_directory(path)) {
    if (auto latest = latest_checkpoint(path)) return *latest;
    return (fs::path(path) / "ckpt").string();
  }
  const std::string suffix = ".index";
  if (path.size() > suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return path.substr(0, path.size() - suffix.size());
  }
  return path;
}

// Reads the whole (small) file at `path`; nullopt if it does not exist.
std::optional<std::string> read_small_file(const std::string& path, uint64_t limit,
                                           const char* who) {
  if (!exists(path)) return std::nullopt;
  internal::InputStream in(path, Compression::kNone, who);
  if (auto left = in.remaining(); left && *left > limit) {
    fail(ErrorCode::kDataLoss, std::string(who) + ": " + path + ": the file is " +
                                   std::to_string(*left) + " bytes, more than a pointer file " +
                                   "can be (" + std::to_string(limit) + "); is it corrupt?");
  }
  std::string text(limit + 1, '\0');
  text.resize(in.read(reinterpret_cast<uint8_t*>(text.data()), text.size()));
  if (text.size() > limit) {
    fail(ErrorCode::kDataLoss, std::string(who) + ": " + path + ": the file is too large");
  }
  return text;
}

class SilentErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first.empty()) first = "line " + std::to_string(line + 1) + ": " + message;
  }
  std::string first;
};

std::optional<int64_t> step_of(const std::string& name) {
  const std::string start = "ckpt-", end = ".index";
  if (name.size() <= start.size() + end.size() || name.rfind(start, 0) != 0 ||
      name.compare(name.size() - end.size(), end.size(), end) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(start.size(), name.size() - start.size() - end.size());
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

// The ckpt-<step> checkpoints in `dir`, by step.
std::vector<std::pair<int64_t, std::string>> numbered_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (auto step = step_of(name)) {
      found.emplace_back(*step, (fs::path(dir) / name.substr(0, name.size() - 6)).string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

// ---- save -----------------------------------------------------------------------------------

namespace {

std::string save_with_fault(const std::string& path, const std::map<std::string, Tensor>& tensors,
                            const Metadata& metadata, const SaveFault& fault) {
  const std::string prefix = save_prefix(path);
  for (const auto& [name, t] : tensors) {
    if (name.empty()) fail(ErrorCode::kInvalidArgument, "save_checkpoint: a tensor has no name");
    if (!t.defined() || t.is_symbolic()) {
      fail(ErrorCode::kInvalidArgument, "save_checkpoint: tensor '" + name + "' is " +
                                            (t.defined() ? "symbolic" : "undefined") +
                                            "; only concrete tensors can be saved");
    }
  }
  const std::string dir = dir_of(prefix), base = base_of(prefix);
  internal::make_directories(dir, "save_checkpoint");

  proto::CheckpointIndex index;
  index.set_format_version(kFormatVersion);
  uint64_t size = 0;
  for (const auto& [name, t] : tensors) {
    size = align_up(size);
    proto::CheckpointTensor* e = index.add_tensors();
    e->set_name(name);
    e->set_dtype(internal::to_proto(t.dtype()));
    for (int64_t d : t.shape()) e->add_shape(d);
    e->set_offset(size);
    e->set_length(t.nbytes());
    e->set_crc32c(crc32c::value(t.raw_data(), t.nbytes()));
    size += t.nbytes();
  }
  const std::string data_name = base + ".data-" + random_hex16();
  index.set_data_file(data_name);
  index.set_data_size(size);
  for (const auto& [key, value] : metadata) {
    proto::MetadataEntry& v = *index.add_metadata();
    v.set_key(key);
    if (const auto* i = std::get_if<int64_t>(&value)) {
      v.set_i(*i);
    } else {
      v.set_s(std::get<std::string>(value));
    }
  }

  {
    internal::OutputFile data((fs::path(dir) / data_name).string(),
                              internal::OutputFile::Mode::kAtomic, Compression::kNone,
                              "save_checkpoint");
    fault.partway(SaveStage::kDataPartial, data, size);
    static const char zeros[kAlign] = {};
    uint64_t written = 0;
    int i = 0;
    for (const auto& [name, t] : tensors) {
      const proto::CheckpointTensor& e = index.tensors(i++);
      data.write(zeros, e.offset() - written);
      data.write(t.raw_data(), e.length());
      written = e.offset() + e.length();
    }
    fault.before_rename(SaveStage::kDataWritten, data);
    data.close();  // fsync, rename to its fresh name, fsync the directory
  }
  fault.at(SaveStage::kDataRenamed);
  std::string serialized;
  index.SerializeToString(&serialized);
  internal::OutputFile index_file(prefix + ".index", internal::OutputFile::Mode::kAtomic,
                                  Compression::kNone, "save_checkpoint");
  fault.partway(SaveStage::kIndexPartial, index_file, serialized.size());
  internal::write_record(index_file, serialized);
  fault.before_rename(SaveStage::kIndexWritten, index_file);
  index_file.close();  // the commit point
  fault.at(SaveStage::kIndexRenamed);
  sync_directory(dir);
  remove_stale_files(prefix, data_name);
  fault.at(SaveStage::kStaleRemoved);
  return prefix;
}

}  // namespace

std::string save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& tensors,
                            const Metadata& metadata) {
  return save_with_fault(path, tensors, metadata, SaveFault::for_next_save());
}

// ---- load -----------------------------------------------------------------------------------

CheckpointIndex read_checkpoint_index(const std::string& path) {
  const std::string prefix = load_prefix(path, "load_checkpoint");
  const std::string index_path = prefix + ".index";
  if (!exists(index_path)) {
    // Given a file of another kind: say what it is.
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      const internal::FileKind kind = internal::file_kind(path);
      if (kind != internal::FileKind::kCheckpointIndex)
        internal::wrong_kind("load_checkpoint", path, kind, "a checkpoint");
    }
    fail(ErrorCode::kNotFound,
         "load_checkpoint: no checkpoint at '" + prefix + "' (" + index_path + " does not exist)");
  }
  std::vector<std::string> records = read_records(index_path);
  auto corrupt = [&](const std::string& what) {
    fail(ErrorCode::kDataLoss, "load_checkpoint: " + index_path + ": " + what);
  };
  if (records.size() != 1) {
    corrupt("expected one index record, found " + std::to_string(records.size()));
  }
  switch (const internal::FileKind kind = internal::record_kind(records[0])) {
    case internal::FileKind::kWholeModel:
    case internal::FileKind::kExportedGraph:
    case internal::FileKind::kEventFile:
    case internal::FileKind::kExamples:
      internal::wrong_kind("load_checkpoint", index_path, kind, "a checkpoint index");
    default:
      break;
  }
  proto::CheckpointIndex index;
  if (!index.ParseFromString(records[0])) corrupt("the index record is not a CheckpointIndex");
  if (index.format_version() != kFormatVersion) {
    corrupt("unsupported format version " + std::to_string(index.format_version()) +
            " (this Kiln reads version " + std::to_string(kFormatVersion) + ")");
  }
  const std::string& data_file = index.data_file();
  if (data_file.empty() || data_file.find('/') != std::string::npos || data_file == "." ||
      data_file == "..") {
    corrupt("invalid data file name '" + data_file + "'");
  }

  CheckpointIndex out;
  out.prefix = prefix;
  out.data_path = (fs::path(dir_of(prefix)) / data_file).string();
  out.data_size = index.data_size();
  out.metadata = metadata_from_proto(index);
  std::set<std::string> names;
  for (const proto::CheckpointTensor& e : index.tensors()) {
    const std::string where = "tensor '" + e.name() + "' at offset " + std::to_string(e.offset());
    if (e.name().empty()) corrupt("a tensor has no name");
    if (!names.insert(e.name()).second) corrupt("tensor '" + e.name() + "' appears twice");
    std::optional<DType> dtype = internal::from_proto(e.dtype());
    if (!dtype) corrupt(where + ": unknown dtype " + std::to_string(e.dtype()));
    Shape shape(e.shape().begin(), e.shape().end());
    std::optional<uint64_t> nbytes = internal::checked_nbytes(*dtype, shape);
    if (!nbytes) corrupt(where + ": invalid shape " + shape_str(shape));
    if (*nbytes != e.length()) {
      corrupt(where + ": length " + std::to_string(e.length()) + " does not match " +
              dtype_name(*dtype) + shape_str(shape) + " (" + std::to_string(*nbytes) + " bytes)");
    }
    if (e.offset() > out.data_size || e.length() > out.data_size - e.offset()) {
      corrupt(where + ": bytes [" + std::to_string(e.offset()) + ", +" +
              std::to_string(e.length()) + ") lie outside the data file's " +
              std::to_string(out.data_size) + " bytes");
    }
    out.entries.push_back({e.name(), *dtype, std::move(shape), e.offset(), e.length(), e.crc32c()});
  }
  return out;
}

Checkpoint load_checkpoint(const std::string& path) {
  CheckpointIndex index = read_checkpoint_index(path);
  const std::string& data_path = index.data_path;
  auto corrupt = [&](const std::string& what) {
    fail(ErrorCode::kDataLoss, "load_checkpoint: " + data_path + ": " + what);
  };
  const int fd = ::open(data_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    corrupt(std::string("cannot open the data file named by ") + index.prefix +
            ".index: " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) corrupt("not a regular file");
  const uint64_t actual = static_cast<uint64_t>(st.st_size);
  if (actual != index.data_size) {
    corrupt("the file is " + std::to_string(actual) + " bytes, the index says " +
            std::to_string(index.data_size) + (actual < index.data_size ? " (truncated)" : ""));
  }

  Checkpoint out;
  out.prefix = index.prefix;
  out.metadata = std::move(index.metadata);
  for (const CheckpointEntry& e : index.entries) {
    const std::string where = "tensor '" + e.name + "' at offset " + std::to_string(e.offset);
    if (e.offset > actual || e.length > actual - e.offset) {  // checked again: the real size
      corrupt(where + ": its " + std::to_string(e.length) + " bytes lie past the end of the " +
              std::to_string(actual) + "-byte file");
    }
    Tensor t = Tensor::empty(e.dtype, e.shape);
    auto* dst = static_cast<char*>(e.length ? t.raw_mutable_data() : nullptr);
    uint64_t done = 0;
    while (done < e.length) {
      const ssize_t n =
          ::pread(fd, dst + done, e.length - done, static_cast<off_t>(e.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        corrupt(where + ": read failed after " + std::to_string(done) + " bytes" +
                (n < 0 ? std::string(": ") + std::strerror(errno) : " (unexpected end of file)"));
      }
      done += static_cast<uint64_t>(n);
    }
    const uint32_t crc = crc32c::value(dst, e.length);
    if (crc != e.crc32c) {
      corrupt(where + " (" + std::to_string(e.length) + " bytes): CRC-32C mismatch (stored " +
              internal::hex32(e.crc32c) + ", computed " + internal::hex32(crc) +
              "): the checkpoint is corrupt");
    }
    if (e.dtype == bool_ && !internal::valid_bools(dst, e.length)) {
      corrupt(where + ": a bool value is neither 0 nor 1");
    }
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

int64_t Checkpoint::get_int(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end() || !std::holds_alternative<int64_t>(it->second)) {
    fail(ErrorCode::kNotFound, "checkpoint " + prefix + ": no integer metadata '" + key + "'");
  }
  return std::get<int64_t>(it->second);
}

const std::string& Checkpoint::get_string(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end() || !std::holds_alternative<std::string>(it->second)) {
    fail(ErrorCode::kNotFound, "checkpoint " + prefix + ": no string metadata '" + key + "'");
  }
  return std::get<std::string>(it->second);
}

// ---- directories of checkpoints ---------------------------------------------------------

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  const std::string pointer = (fs::path(dir) / kPointerFile).string();
  if (auto text = read_small_file(pointer, kMaxPointerBytes, "latest_checkpoint")) {
    proto::CheckpointState state;
    google::protobuf::TextFormat::Parser parser;
    SilentErrors errors;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(*text, &state)) {
      fail(ErrorCode::kDataLoss, "latest_checkpoint: " + pointer +
                                     ": not a checkpoint pointer file (" + errors.first + ")");
    }
    const std::string& name = state.model_checkpoint_path();
    if (!name.empty()) {
      std::string prefix = fs::path(name).is_absolute() ? name : (fs::path(dir) / name).string();
      if (exists(prefix + ".index")) return prefix;
    }
  }
  auto found = numbered_checkpoints(dir);
  if (found.empty()) return std::nullopt;
  return found.back().second;
}

void remove_checkpoint(const std::string& prefix) {
  std::error_code ec;
  fs::remove(prefix + ".index", ec);
  remove_stale_files(prefix, "");
}

CheckpointManager::CheckpointManager(std::string dir, int max_to_keep)
    : dir_(std::move(dir)), max_to_keep_(max_to_keep) {
  if (dir_.empty()) fail(ErrorCode::kInvalidArgument, "CheckpointManager: the directory is empty");
  internal::make_directories(dir_, "CheckpointManager");
  for (auto& [step, prefix] : numbered_checkpoints(dir_)) checkpoints_.push_back(prefix);
}

std::string CheckpointManager::save(const std::map<std::string, Tensor>& tensors, int64_t step,
                                    const Metadata& metadata) {
  if (step < 0) {
    fail(ErrorCode::kInvalidArgument,
         "CheckpointManager::save: step must be >= 0, got " + std::to_string(step));
  }
  const SaveFault fault = SaveFault::for_next_save();
  const std::string prefix = save_with_fault(
      (fs::path(dir_) / ("ckpt-" + std::to_string(step))).string(), tensors, metadata, fault);
  checkpoints_.erase(std::remove(checkpoints_.begin(), checkpoints_.end(), prefix),
                     checkpoints_.end());
  checkpoints_.push_back(prefix);
  std::vector<std::string> dropped;
  if (max_to_keep_ > 0 && checkpoints_.size() > static_cast<size_t>(max_to_keep_)) {
    const size_t n = checkpoints_.size() - static_cast<size_t>(max_to_keep_);
    dropped.assign(checkpoints_.begin(), checkpoints_.begin() + static_cast<ptrdiff_t>(n));
    checkpoints_.erase(checkpoints_.begin(), checkpoints_.begin() + static_cast<ptrdiff_t>(n));
  }
  {
    struct Scope {
      explicit Scope(const SaveFault& f) { manager_save_fault = &f; }
      ~Scope() { manager_save_fault = nullptr; }
    } scope(fault);
    write_pointer();  // before deleting: the pointer never names a removed checkpoint
  }
  fault.at(SaveStage::kPointerRenamed);
  for (const std::string& p : dropped) remove_checkpoint(p);
  remove_interrupted_saves();  // a run killed again and again must not pile up temp files
  fault.at(SaveStage::kOldRemoved);
  return prefix;
}

std::optional<std::string> CheckpointManager::latest() const {
  if (checkpoints_.empty()) return std::nullopt;
  return checkpoints_.back();
}

void CheckpointManager::remove_all() {
  std::error_code ec;
  fs::remove(fs::path(dir_) / kPointerFile, ec);
  for (const std::string& p : checkpoints_) remove_checkpoint(p);
  checkpoints_.clear();
  remove_interrupted_saves();
}

// Leftovers of interrupted saves: ckpt-<n>.*.tmp-*, checkpoint.tmp-*.
void CheckpointManager::remove_interrupted_saves() const {
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if ((name.rfind("ckpt-", 0) == 0 || name.rfind(kPointerFile, 0) == 0) &&
        name.find(".tmp-") != std::string::npos) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

void CheckpointManager::write_pointer() const {
  proto::CheckpointState state;
  for (const std::string& p : checkpoints_) state.add_all_model_checkpoint_paths(base_of(p));
  if (!checkpoints_.empty()) state.set_model_checkpoint_path(base_of(checkpoints_.back()));
  std::string text;
  google::protobuf::TextFormat::PrintToString(state, &text);
  internal::OutputFile file((fs::path(dir_) / kPointerFile).string(),
                            internal::OutputFile::Mode::kAtomic, Compression::kNone,
                            "CheckpointManager");
  const SaveFault none;
  const SaveFault& fault = manager_save_fault ? *manager_save_fault : none;
  fault.partway(SaveStage::kPointerPartial, file, text.size());
  file.write(text.data(), text.size());
  fault.before_rename(SaveStage::kPointerWritten, file);
  file.close();
}

}  // namespace kiln::io

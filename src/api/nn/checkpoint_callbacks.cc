// ModelCheckpoint and BackupAndRestore: model.state() saved through kiln::io checkpoints, with
// the position in fit recorded so that a backup resumes exactly.
#include "kiln/nn/checkpoint_callbacks.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "kiln/nn/model.h"
#include "src/api/nn/writable_dir.h"

namespace kiln::nn {
namespace {

using detail::check_writable;

int64_t batches_from(const SaveFreq& freq, const char* who) {
  if (const auto* n = std::get_if<int64_t>(&freq)) {
    if (*n <= 0) {
      throw Error(ErrorCode::kInvalidArgument, std::string(who) +
                                                   ": save_freq must be \"epoch\" or a number "
                                                   "of batches > 0, got " +
                                                   std::to_string(*n));
    }
    return *n;
  }
  const std::string& s = std::get<std::string>(freq);
  if (s != "epoch") {
    throw Error(ErrorCode::kInvalidArgument, std::string(who) +
                                                 ": save_freq must be \"epoch\" or a number of "
                                                 "batches, got \"" +
                                                 s + "\"");
  }
  return 0;
}

std::string list_keys(const Logs& logs) {
  std::string have;
  for (const auto& [k, v] : logs) have += (have.empty() ? "" : ", ") + k;
  return have.empty() ? "none" : have;
}

// printf of one value with a user's spec ("02d", ".4f"): only flags, width, precision and one
// of d f e E g G are accepted, so a pattern can never reach printf's other conversions.
std::string format_value(double value, bool integral, const std::string& spec,
                         const std::string& pattern) {
  if (spec.empty()) {
    if (integral) return std::to_string(static_cast<long long>(value));
    char s[64];
    std::snprintf(s, sizeof s, "%g", value);
    return s;
  }
  const char conv = spec.back();
  const std::string body = spec.substr(0, spec.size() - 1);
  bool ok = std::string("dfeEgG").find(conv) != std::string::npos && body.size() < 16;
  for (char c : body)
    ok = ok && (std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' ||
                c == '0' || c == ' ' || c == '#');
  if (!ok) {
    throw Error(ErrorCode::kInvalidArgument,
                "ModelCheckpoint: unsupported format '" + spec + "' in path pattern '" + pattern +
                    "' (use d, f, e or g with flags, width and precision, as in {epoch:02d})");
  }
  char s[128];
  if (conv == 'd') {
    std::snprintf(s, sizeof s, ("%" + body + "lld").c_str(), static_cast<long long>(value));
  } else {
    std::snprintf(s, sizeof s, ("%" + body + conv).c_str(), value);
  }
  return s;
}

// Fills {name} and {name:spec} in `pattern` from the position and the logs.
std::string format_path(const std::string& pattern, int epoch1, int64_t batch, int64_t step,
                        const Logs& logs) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '{') {
      out += pattern[i];
      continue;
    }
    const size_t close = pattern.find('}', i);
    if (close == std::string::npos) {
      throw Error(ErrorCode::kInvalidArgument,
                  "ModelCheckpoint: unclosed '{' in path pattern '" + pattern + "'");
    }
    const std::string field = pattern.substr(i + 1, close - i - 1);
    const size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    if (name == "epoch" || name == "batch" || name == "step") {
      const double v = name == "epoch" ? epoch1 : name == "batch" ? batch : step;
      out += format_value(v, true, spec, pattern);
    } else if (auto it = logs.find(name); it != logs.end()) {
      out += format_value(it->second, false, spec, pattern);
    } else {
      throw Error(ErrorCode::kInvalidArgument,
                  "ModelCheckpoint: path pattern '" + pattern + "' uses {" + name +
                      "}, which is neither epoch, batch, step nor a logged value (logs: " +
                      list_keys(logs) + ")");
    }
    i = close;
  }
  return out;
}

}  // namespace

// ---- ModelCheckpoint ------------------------------------------------------------------------

ModelCheckpoint::ModelCheckpoint(std::string path, ModelCheckpointOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  if (path_.empty()) throw Error(ErrorCode::kInvalidArgument, "ModelCheckpoint: the path is empty");
  every_ = batches_from(options_.save_freq, "ModelCheckpoint");
  if (options_.mode == "auto") {
    const bool higher = options_.monitor.find("acc") != std::string::npos ||
                        options_.monitor.find("auc") != std::string::npos;
    options_.mode = higher ? "max" : "min";
  }
  if (options_.mode != "min" && options_.mode != "max") {
    throw Error(ErrorCode::kInvalidArgument,
                "ModelCheckpoint: mode must be \"auto\", \"min\" or "
                "\"max\", got \"" +
                    options_.mode + "\"");
  }
}

void ModelCheckpoint::on_train_begin(Logs&) {
  const size_t brace = path_.find('{');
  if (brace == std::string::npos) {
    check_writable(path_, "ModelCheckpoint");
  } else {
    // The directories before the first field are known now; the rest are made at each save.
    const std::string dir = std::filesystem::path(path_.substr(0, brace)).parent_path().string();
    check_writable(dir.empty() ? "." : dir, "ModelCheckpoint");
  }
  if (!manager_ && brace == std::string::npos) {
    manager_ = std::make_unique<io::CheckpointManager>(path_, options_.max_to_keep);
  }
}

void ModelCheckpoint::on_train_batch_end(int64_t batch, Logs& logs) {
  if (every_ > 0 && model()->optimizer().iterations() % every_ == 0) {
    maybe_save(epoch_, batch + 1, logs);
  }
}

void ModelCheckpoint::on_epoch_end(int epoch, Logs& logs) {
  if (every_ == 0) maybe_save(epoch + 1, 0, logs);
}

void ModelCheckpoint::maybe_save(int next_epoch, int64_t next_batch, const Logs& logs) {
  auto it = logs.find(options_.monitor);
  if (options_.save_best_only) {
    if (it == logs.end()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "ModelCheckpoint: save_best_only monitors '" + options_.monitor +
                      "', which is not in the logs (" + list_keys(logs) + ")");
    }
    const double v = it->second;
    const bool improved =
        !std::isnan(v) && (std::isnan(best_) || (options_.mode == "min" ? v < best_ : v > best_));
    if (!improved) return;
    best_ = v;
  }
  const int64_t step = model()->optimizer().iterations();
  io::Metadata meta = {{"epoch", int64_t{next_epoch}},
                       {"batch", next_batch},
                       {"step", step},
                       {"model", model()->name()}};
  if (it != logs.end()) {
    meta["monitor"] = options_.monitor;
    meta["monitor_value"] = std::to_string(it->second);
  }
  std::map<std::string, Tensor> state = model()->state();
  if (manager_) {
    last_saved_ = manager_->save(state, step, meta);
  } else {
    // {epoch} is 1-based: the epoch being (or just) trained, as Keras names its files.
    const int epoch1 = next_batch == 0 ? next_epoch : next_epoch + 1;
    last_saved_ =
        io::save_checkpoint(format_path(path_, epoch1, next_batch, step, logs), state, meta);
  }
  if (options_.verbose) std::printf("ModelCheckpoint: saved %s\n", last_saved_.c_str());
}

// ---- BackupAndRestore -----------------------------------------------------------------------

BackupAndRestore::BackupAndRestore(std::string backup_dir, SaveFreq save_freq, bool delete_backup)
    : dir_(std::move(backup_dir)), delete_backup_(delete_backup) {
  if (dir_.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "BackupAndRestore: the backup directory is empty");
  }
  every_ = batches_from(save_freq, "BackupAndRestore");
}

void BackupAndRestore::on_train_begin(Logs&) {
  check_writable(dir_, "BackupAndRestore");
  manager_ = std::make_unique<io::CheckpointManager>(dir_, /*max_to_keep=*/1);
  restored_at_.reset();
  saved_at_step_ = -1;
  const std::string start_over =
      "delete " + dir_ + " (or pass a fresh backup directory) to start over";
  io::Checkpoint backup;
  int64_t epoch = 0, batch = 0;
  try {
    std::optional<std::string> latest = io::latest_checkpoint(dir_);
    if (!latest) return;
    backup = io::load_checkpoint(*latest);
    epoch = backup.get_int("epoch");
    batch = backup.get_int("batch");
    if (epoch < 0 || epoch > std::numeric_limits<int>::max() || batch < 0) {
      throw Error(ErrorCode::kDataLoss, backup.prefix + " records an invalid position (epoch " +
                                            std::to_string(epoch) + ", batch " +
                                            std::to_string(batch) + ")");
    }
  } catch (const Error& e) {
    throw Error(e.code(), "BackupAndRestore: cannot load the backup in " + dir_ + ": " + e.what() +
                              "; " + start_over);
  }
  try {
    model()->load_state(backup.tensors);
  } catch (const Error& e) {
    throw Error(e.code(), "BackupAndRestore: cannot restore " + backup.prefix +
                              " (a backup of another model? " + start_over + "): " + e.what());
  }
  model()->resume_at(static_cast<int>(epoch), batch);
  restored_at_ = std::make_pair(static_cast<int>(epoch), batch);
  saved_at_step_ = model()->optimizer().iterations();
  // 1-based, as fit's progress counts epochs and batches: the next batch to run.
  std::printf("Resuming from epoch %lld, batch %lld of %s\n", static_cast<long long>(epoch + 1),
              static_cast<long long>(batch + 1), dir_.c_str());
  std::fflush(stdout);
}

void BackupAndRestore::on_train_batch_end(int64_t batch, Logs&) {
  const int64_t step = model()->optimizer().iterations();
  if (every_ > 0 && step % every_ == 0) save(epoch_, batch + 1);
}

void BackupAndRestore::on_epoch_end(int epoch, Logs&) {
  // Each epoch; and when a batch save fell on this epoch's last batch, record it again as the
  // start of the next epoch, so a resume does not replay an empty remainder of this one.
  const bool saved_last_batch = saved_at_step_ == model()->optimizer().iterations();
  if (every_ == 0 || saved_last_batch) save(epoch + 1, 0);
}

void BackupAndRestore::on_train_end(Logs&) {
  if (!delete_backup_ || !manager_) return;
  manager_->remove_all();
  std::error_code ec;
  std::filesystem::remove(dir_, ec);  // only if empty
}

void BackupAndRestore::save(int next_epoch, int64_t next_batch) {
  const int64_t step = model()->optimizer().iterations();
  manager_->save(model()->state(), step,
                 {{"epoch", int64_t{next_epoch}}, {"batch", next_batch}, {"step", step}});
  saved_at_step_ = step;
}

}  // namespace kiln::nn

// The models a server serves: for each configured model, the versions under its base path that
// its version policy selects, loaded and warmed up before they take traffic, unloaded once
// their in-flight requests finish. A version that fails to load is reported in the status and
// never replaces a good one. TF Serving's AspiredVersionsManager and FileSystemStoragePathSource
// in one small class.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/io/saved_model.h"

namespace kiln::serving {

struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int64_t num_latest = 1;         // kLatest
  std::vector<int64_t> versions;  // kSpecific
};

struct ModelSpec {
  std::string name;
  std::string base_path;  // holds <version>/ directories written by io::save_model
  VersionPolicy policy;
  std::map<std::string, int64_t> labels;  // "stable" -> 42
  // Batch sizes each new version is compiled for before it serves (empty: none).
  std::vector<int64_t> warmup_batch_sizes = {1};
};

// Reads a ModelServerConfig in text format (TF Serving's --model_config_file). Throws
// kiln::Error (kInvalidArgument) naming the file and the parser's line and column.
std::vector<ModelSpec> read_model_config_file(const std::string& path);
std::vector<ModelSpec> parse_model_config(const std::string& text, const std::string& where);

// TF Serving's version states.
enum class VersionState { kStart, kLoading, kAvailable, kUnloading, kEnd };
const char* state_name(VersionState s);  // "START", "LOADING", "AVAILABLE", ...

struct VersionStatus {
  int64_t version = 0;
  VersionState state = VersionState::kStart;
  std::string error;  // why it failed to load (state kEnd), else empty
};

// A loaded version; requests hold it while they run, so unloading waits for them.
struct Servable {
  std::string model;
  int64_t version = 0;
  io::LoadedModel model_handle;
};

class ModelManager {
 public:
  explicit ModelManager(std::vector<ModelSpec> specs);
  ~ModelManager();  // stops polling

  // Scans every base path once: loads (and warms up) newly selected versions, then makes them
  // available, then drops versions no longer selected. Returns whether anything changed.
  bool poll();
  // Polls every `seconds` on a thread of its own until stop() or destruction.
  void start_polling(double seconds);
  void stop();

  // The version a request asks for: a number, a label, or (neither) the newest available one.
  // Throws kiln::Error kNotFound naming the model and what was asked ("version 3", "label
  // 'canary'") when it is not being served.
  std::shared_ptr<const Servable> get(const std::string& model, std::optional<int64_t> version,
                                      const std::string& label = "") const;

  // Every version of `model` seen, newest first, with its state (kNotFound for an unknown
  // model; a version or label narrows it down to one entry).
  std::vector<VersionStatus> status(const std::string& model, std::optional<int64_t> version,
                                    const std::string& label = "") const;

  std::vector<std::string> models() const;
  int64_t load_failures() const { return load_failures_.load(); }

 private:
  struct Model {
    ModelSpec spec;
    std::map<int64_t, std::shared_ptr<const Servable>> live;  // available versions
    std::map<int64_t, VersionStatus> seen;
  };
  const Model& model(const std::string& name) const;
  int64_t resolve(const Model& m, std::optional<int64_t> version, const std::string& label) const;

  mutable std::mutex mu_;
  std::map<std::string, Model> models_;
  std::mutex poll_mu_;  // one poll at a time; guards failed_at_
  // When a version failed to load: its directory's time then (retried once it changes).
  std::map<std::pair<std::string, int64_t>, std::filesystem::file_time_type> failed_at_;
  std::atomic<int64_t> load_failures_{0};

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread poller_;
};

}  // namespace kiln::serving

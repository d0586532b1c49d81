// Versions found on disk, loaded, warmed up, served and unloaded (serving/model_manager.h).
#include "serving/model_manager.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "serving/proto/model_server_config.pb.h"
#include "serving/text_proto.h"

namespace kiln::serving {
namespace fs = std::filesystem;

namespace {

// The numeric version directories under `base`, each with its saved_model.pb (a version being
// written is a temporary directory, renamed into place when complete).
std::map<int64_t, fs::file_time_type> versions_on_disk(const std::string& base) {
  std::map<int64_t, fs::file_time_type> out;
  std::error_code ec;
  for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.size() > 18 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    std::error_code e2;
    if (!fs::exists(it->path() / "saved_model.pb", e2)) continue;
    out[std::stoll(name)] = fs::last_write_time(it->path(), e2);
  }
  return out;
}

std::set<int64_t> select(const VersionPolicy& p,
                         const std::map<int64_t, fs::file_time_type>& on_disk) {
  std::set<int64_t> out;
  switch (p.kind) {
    case VersionPolicy::Kind::kAll:
      for (const auto& [v, t] : on_disk) out.insert(v);
      break;
    case VersionPolicy::Kind::kSpecific:
      for (int64_t v : p.versions)
        if (on_disk.count(v)) out.insert(v);
      break;
    case VersionPolicy::Kind::kLatest: {
      int64_t n = std::max<int64_t>(1, p.num_latest);
      for (auto it = on_disk.rbegin(); it != on_disk.rend() && n > 0; ++it, --n)
        out.insert(it->first);
      break;
    }
  }
  return out;
}

// Compiles the serving signature for each batch size, on zeros (unknown inner dimensions: 1).
void warm_up(const io::LoadedModel& m, const std::vector<int64_t>& batch_sizes) {
  auto sig = m.signatures().find("serving_default");
  if (sig == m.signatures().end()) return;
  for (int64_t b : batch_sizes) {
    std::map<std::string, Tensor> inputs;
    for (const auto& [name, type] : sig->second.inputs) {
      Shape s = type.shape;
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] == kUnknownDim) s[i] = i == 0 ? b : 1;
      inputs[name] = zeros(s, type.dtype);
    }
    m.run("serving_default", inputs);
  }
}

}  // namespace

const char* state_name(VersionState s) {
  switch (s) {
    case VersionState::kStart:
      return "START";
    case VersionState::kLoading:
      return "LOADING";
    case VersionState::kAvailable:
      return "AVAILABLE";
    case VersionState::kUnloading:
      return "UNLOADING";
    case VersionState::kEnd:
      return "END";
  }
  return "UNKNOWN";
}

std::vector<ModelSpec> parse_model_config(const std::string& text, const std::string& where) {
  tensorflow::serving::ModelServerConfig config;
  parse_text_proto(text, &config, "model config " + where);
  std::vector<ModelSpec> specs;
  std::set<std::string> names;
  for (const auto& c : config.model_config_list().config()) {
    ModelSpec s;
    s.name = c.name();
    s.base_path = c.base_path();
    if (s.name.empty() || s.base_path.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  "model config " + where + ": every model needs a name and a base_path");
    if (!names.insert(s.name).second)
      throw Error(ErrorCode::kInvalidArgument,
                  "model config " + where + ": model '" + s.name + "' is configured twice");
    const auto& p = c.model_version_policy();
    if (p.has_all()) {
      s.policy.kind = VersionPolicy::Kind::kAll;
    } else if (p.has_specific()) {
      s.policy.kind = VersionPolicy::Kind::kSpecific;
      s.policy.versions.assign(p.specific().versions().begin(), p.specific().versions().end());
    } else if (p.has_latest() && p.latest().num_versions() > 0) {
      s.policy.num_latest = p.latest().num_versions();
    }
    for (const auto& [label, version] : c.version_labels()) s.labels[label] = version;
    specs.push_back(std::move(s));
  }
  if (specs.empty())
    throw Error(ErrorCode::kInvalidArgument, "model config " + where + " configures no model");
  return specs;
}

std::vector<ModelSpec> read_model_config_file(const std::string& path) {
  return parse_model_config(read_config_file(path, "model config file"), "'" + path + "'");
}

ModelManager::ModelManager(std::vector<ModelSpec> specs) {
  for (ModelSpec& s : specs) {
    const std::string name = s.name;
    models_[name].spec = std::move(s);
  }
}

ModelManager::~ModelManager() { stop(); }

bool ModelManager::poll() {
  std::lock_guard poll_lock(poll_mu_);
  bool changed = false;
  std::vector<std::string> names = models();
  for (const std::string& name : names) {
    ModelSpec spec;
    std::map<int64_t, VersionStatus> seen;
    {
      std::lock_guard lock(mu_);
      spec = models_.at(name).spec;
      seen = models_.at(name).seen;
    }
    const auto on_disk = versions_on_disk(spec.base_path);
    const std::set<int64_t> wanted = select(spec.policy, on_disk);
    for (int64_t v : wanted) {
      auto s = seen.find(v);
      if (s != seen.end() && s->second.state == VersionState::kAvailable) continue;
      if (s != seen.end() && !s->second.error.empty() && failed_at_[{name, v}] == on_disk.at(v))
        continue;  // failed before, and its directory has not changed since
      {
        std::lock_guard lock(mu_);
        models_.at(name).seen[v] = {v, VersionState::kLoading, ""};
      }
      std::shared_ptr<const Servable> servable;
      std::string error;
      try {
        io::LoadedModel loaded = io::load_model(spec.base_path, v);
        warm_up(loaded, spec.warmup_batch_sizes);
        servable = std::make_shared<const Servable>(Servable{name, v, std::move(loaded)});
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard lock(mu_);
      Model& m = models_.at(name);
      if (error.empty()) {
        m.live[v] = std::move(servable);
        m.seen[v] = {v, VersionState::kAvailable, ""};
      } else {
        ++load_failures_;
        failed_at_[{name, v}] = on_disk.at(v);
        m.seen[v] = {v, VersionState::kEnd, error};
      }
      changed = true;
    }
    // Unload what is no longer wanted, unless that would leave nothing to serve: a new version
    // that failed to load never replaces a good one.
    std::lock_guard lock(mu_);
    Model& m = models_.at(name);
    bool any_wanted_live = false;
    for (int64_t v : wanted) any_wanted_live |= m.live.count(v) > 0;
    if (!any_wanted_live) continue;
    for (auto it = m.live.begin(); it != m.live.end();) {
      if (wanted.count(it->first)) {
        ++it;
        continue;
      }
      m.seen[it->first] = {it->first, VersionState::kEnd, ""};
      it = m.live.erase(it);  // requests still holding it finish first
      changed = true;
    }
  }
  return changed;
}

void ModelManager::start_polling(double seconds) {
  stop();
  stopping_ = false;
  poller_ = std::thread([this, seconds] {
    std::unique_lock lock(stop_mu_);
    while (!stopping_) {
      lock.unlock();
      try {
        poll();
      } catch (const std::exception&) {
        // a base path that cannot be read is retried at the next poll
      }
      lock.lock();
      stop_cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return stopping_; });
    }
  });
}

void ModelManager::stop() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

std::vector<std::string> ModelManager::models() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, m] : models_) out.push_back(name);
  return out;
}

const ModelManager::Model& ModelManager::model(const std::string& name) const {
  auto it = models_.find(name);
  if (it == models_.end())
    throw Error(ErrorCode::kNotFound,
                "Servable not found for request: model '" + name + "' is not served here");
  return it->second;
}

int64_t ModelManager::resolve(const Model& m, std::optional<int64_t> version,
                              const std::string& label) const {
  if (!label.empty()) {
    auto it = m.spec.labels.find(label);
    if (it == m.spec.labels.end())
      throw Error(ErrorCode::kNotFound, "Servable not found for request: model '" + m.spec.name +
                                            "' has no version label '" + label + "'");
    return it->second;
  }
  if (version) return *version;
  if (m.live.empty())
    throw Error(ErrorCode::kNotFound, "Servable not found for request: Latest(" + m.spec.name +
                                          "): no version of it is available");
  return m.live.rbegin()->first;
}

std::shared_ptr<const Servable> ModelManager::get(const std::string& name,
                                                  std::optional<int64_t> version,
                                                  const std::string& label) const {
  std::lock_guard lock(mu_);
  const Model& m = model(name);
  const int64_t v = resolve(m, version, label);
  auto it = m.live.find(v);
  if (it == m.live.end()) {
    std::string avail;
    for (const auto& [k, s] : m.live) avail += (avail.empty() ? "" : ", ") + std::to_string(k);
    throw Error(ErrorCode::kNotFound,
                "Servable not found for request: Specific(" + name + ", " + std::to_string(v) +
                    ") (available versions: " + (avail.empty() ? "none" : avail) + ")");
  }
  return it->second;
}

std::vector<VersionStatus> ModelManager::status(const std::string& name,
                                                std::optional<int64_t> version,
                                                const std::string& label) const {
  std::lock_guard lock(mu_);
  const Model& m = model(name);
  std::vector<VersionStatus> out;
  if (version || !label.empty()) {
    const int64_t v = resolve(m, version, label);
    auto it = m.seen.find(v);
    if (it == m.seen.end())
      throw Error(ErrorCode::kNotFound,
                  "Could not find version " + std::to_string(v) + " of model '" + name + "'");
    out.push_back(it->second);
    return out;
  }
  for (auto it = m.seen.rbegin(); it != m.seen.rend(); ++it) out.push_back(it->second);
  return out;
}

}  // namespace kiln::serving

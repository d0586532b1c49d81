// TF Serving's REST endpoints (serving/rest_api.h).
#include "serving/rest_api.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>

#include "kiln/error.h"
#include "serving/predict_json.h"
#include "serving/tensor_proto.h"

namespace kiln::serving {
namespace {

// What a /v1/models/... path names.
struct Target {
  std::string model, label, verb;  // verb: "", "metadata" or "predict"
  std::optional<int64_t> version;
};

[[noreturn]] void bad_path(const std::string& path, const std::string& why) {
  throw Error(ErrorCode::kNotFound, "Malformed request: " + path + " (" + why + ")");
}

Target parse_path(const std::string& path) {
  const std::string prefix = "/v1/models/";
  if (path.rfind(prefix, 0) != 0) bad_path(path, "paths start with " + prefix);
  std::string rest = path.substr(prefix.size());
  Target t;
  if (size_t colon = rest.rfind(':');
      colon != std::string::npos && rest.find('/', colon) == std::string::npos) {
    t.verb = rest.substr(colon + 1);
    rest.resize(colon);
    if (t.verb != "predict")
      bad_path(path, "':" + t.verb + "' is not supported; this server answers ':predict'");
  }
  std::vector<std::string> parts;
  for (size_t b = 0, e; b <= rest.size(); b = e + 1) {
    e = std::min(rest.find('/', b), rest.size());
    parts.push_back(rest.substr(b, e - b));
  }
  if (parts.empty() || parts[0].empty()) bad_path(path, "no model name");
  t.model = parts[0];
  size_t i = 1;
  if (i < parts.size() && (parts[i] == "versions" || parts[i] == "labels")) {
    if (i + 1 >= parts.size() || parts[i + 1].empty()) bad_path(path, parts[i] + " needs a value");
    if (parts[i] == "versions") {
      int64_t v = 0;
      const std::string& s = parts[i + 1];
      auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (r.ec != std::errc() || r.ptr != s.data() + s.size())
        bad_path(path, "version '" + s + "' is not a number");
      t.version = v;
    } else {
      t.label = parts[i + 1];
    }
    i += 2;
  }
  if (i < parts.size() && parts[i] == "metadata" && t.verb.empty()) {
    t.verb = "metadata";
    ++i;
  }
  if (i != parts.size()) bad_path(path, "unexpected '" + parts[i] + "'");
  return t;
}

std::string tensor_infos(const std::map<std::string, TensorType>& m) {
  std::string out = "{";
  bool first = true;
  for (const auto& [name, type] : m) {
    out += (first ? "" : ", ") + json_string(name) + ": {\"dtype\": \"" + tf_dtype_name(type.dtype) +
           "\", \"tensor_shape\": {\"dim\": [";
    for (size_t i = 0; i < type.shape.size(); ++i)
      out += (i ? ", " : "") + std::string("{\"size\": \"") + std::to_string(type.shape[i]) +
             "\", \"name\": \"\"}";
    out += "], \"unknown_rank\": false}, \"name\": " + json_string(name) + "}";
    first = false;
  }
  return out + "}";
}

std::string status_json(const std::vector<VersionStatus>& versions) {
  std::string out = "{\"model_version_status\": [";
  for (size_t i = 0; i < versions.size(); ++i) {
    const VersionStatus& v = versions[i];
    out += (i ? ", " : "") + std::string("{\"version\": \"") + std::to_string(v.version) +
           "\", \"state\": \"" + state_name(v.state) + "\", \"status\": {\"error_code\": \"" +
           (v.error.empty() ? "OK" : "UNKNOWN") + "\", \"error_message\": " + json_string(v.error) +
           "}}";
  }
  return out + "]}";
}

std::string metadata_json(const Servable& s) {
  std::string out = "{\"model_spec\": {\"name\": " + json_string(s.model) +
                    ", \"signature_name\": \"\", \"version\": \"" + std::to_string(s.version) +
                    "\"}, \"metadata\": {\"signature_def\": {\"signature_def\": {";
  bool first = true;
  for (const auto& [name, sig] : s.model_handle.signatures()) {
    out += (first ? "" : ", ") + json_string(name) + ": {\"inputs\": " + tensor_infos(sig.inputs) +
           ", \"outputs\": " + tensor_infos(sig.outputs) +
           ", \"method_name\": \"tensorflow/serving/predict\"}";
    first = false;
  }
  return out + "}}}}";
}

}  // namespace

int http_status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kOutOfRange:
      return 400;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kUnimplemented:
      return 501;
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

namespace {

// What a request was about, for the metrics.
struct Seen {
  std::string model, version, api = "other";
};

HttpReply respond(const ModelManager& models, const std::string& method, const std::string& path,
                  const std::string& body, Batcher* batcher, Seen& seen) {
  try {
    const Target t = parse_path(path);
    seen.model = t.model;
    seen.api = t.verb.empty() ? "status" : t.verb;
    if (t.verb == "predict") {
      if (method != "POST") return {405, error_json(":predict takes a POST request")};
      std::shared_ptr<const Servable> s = models.get(t.model, t.version, t.label);
      seen.version = std::to_string(s->version);
      PredictRequest req = parse_predict_request(body, s->model_handle.signatures());
      std::map<std::string, Tensor> out =
          batcher ? batcher->run(s, req.signature_name, std::move(req.inputs))
                  : s->model_handle.run(req.signature_name, req.inputs);
      return {200, format_predict_response(out, req.format)};
    }
    if (method != "GET") return {405, error_json(path + " takes a GET request")};
    if (t.verb == "metadata") {
      std::shared_ptr<const Servable> s = models.get(t.model, t.version, t.label);
      seen.version = std::to_string(s->version);
      return {200, metadata_json(*s)};
    }
    return {200, status_json(models.status(t.model, t.version, t.label))};
  } catch (const Error& e) {
    return {http_status_of(e.code()), error_json(e.what())};
  } catch (const std::exception& e) {
    return {500, error_json(e.what())};
  }
}

}  // namespace

HttpReply handle_rest(const ModelManager& models, const std::string& method,
                      const std::string& path, const std::string& body, Batcher* batcher,
                      Metrics* metrics) {
  if (path == "/monitoring/prometheus/metrics") {
    if (method != "GET") return {405, error_json(path + " takes a GET request")};
    if (!metrics) return {404, error_json("this server keeps no metrics")};
    return {200, metrics->prometheus_text(models, batcher)};
  }
  const auto start = std::chrono::steady_clock::now();
  Seen seen;
  HttpReply reply = respond(models, method, path, body, batcher, seen);
  if (metrics) {
    metrics->record(
        seen.model, seen.version, seen.api, reply.status,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return reply;
}

}  // namespace kiln::serving

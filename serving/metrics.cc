// Prometheus text exposition of the server's counters (serving/metrics.h).
#include "serving/metrics.h"

#include <cstdio>

namespace kiln::serving {
namespace {

// A label value escaped as Prometheus' text format wants it.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return "\"" + out + "\"";
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Metrics::record(const std::string& model, const std::string& version, const std::string& api,
                     int status, double seconds) {
  std::lock_guard lock(mu_);
  ++requests_[{model, version, api, status}];
  Histogram& h = latency_[{model, version}];
  for (size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) ++h.counts[i];
  ++h.count;
  h.sum += seconds;
}

std::string Metrics::prometheus_text(const ModelManager& models, const Batcher* batcher) const {
  std::string out;
  {
    std::lock_guard lock(mu_);
    header(out, "kiln_serving_requests_total", "counter",
           "Requests by model, version, API and HTTP status.");
    for (const auto& [key, n] : requests_) {
      const auto& [model, version, api, status] = key;
      out += "kiln_serving_requests_total{model=" + label(model) + ",version=" + label(version) +
             ",api=" + label(api) + ",status=\"" + std::to_string(status) + "\"} " +
             std::to_string(n) + "\n";
    }
    header(out, "kiln_serving_request_latency_seconds", "histogram",
           "Request latency in the server, by model and version.");
    for (const auto& [key, h] : latency_) {
      const std::string labels = "model=" + label(key.first) + ",version=" + label(key.second);
      for (size_t i = 0; i < kBuckets.size(); ++i)
        out += "kiln_serving_request_latency_seconds_bucket{" + labels + ",le=\"" +
               number(kBuckets[i]) + "\"} " + std::to_string(h.counts[i]) + "\n";
      out += "kiln_serving_request_latency_seconds_bucket{" + labels + ",le=\"+Inf\"} " +
             std::to_string(h.count) + "\n";
      out += "kiln_serving_request_latency_seconds_sum{" + labels + "} " + number(h.sum) + "\n";
      out += "kiln_serving_request_latency_seconds_count{" + labels + "} " +
             std::to_string(h.count) + "\n";
    }
  }
  header(out, "kiln_serving_versions_available", "gauge", "Versions serving, by model.");
  for (const std::string& m : models.models()) {
    int64_t available = 0;
    for (const VersionStatus& v : models.status(m, std::nullopt))
      available += v.state == VersionState::kAvailable;
    out += "kiln_serving_versions_available{model=" + label(m) + "} " + std::to_string(available) +
           "\n";
  }
  header(out, "kiln_serving_load_failures_total", "counter", "Versions that failed to load.");
  out += "kiln_serving_load_failures_total " + std::to_string(models.load_failures()) + "\n";
  if (batcher) {
    const Batcher::Stats s = batcher->stats();
    const std::pair<const char*, int64_t> counters[] = {
        {"kiln_serving_batches_total", s.batches},
        {"kiln_serving_batched_requests_total", s.requests},
        {"kiln_serving_batched_rows_total", s.rows},
        {"kiln_serving_padded_rows_total", s.padded_rows},
        {"kiln_serving_rejected_requests_total", s.rejected}};
    for (const auto& [name, v] : counters) {
      header(out, name, "counter", "Dynamic batching.");
      out += std::string(name) + " " + std::to_string(v) + "\n";
    }
    header(out, "kiln_serving_queued_rows", "gauge", "Rows waiting in the batching queues.");
    out += "kiln_serving_queued_rows " + std::to_string(s.queued_rows) + "\n";
  }
  return out;
}

}  // namespace kiln::serving

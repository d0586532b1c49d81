// The server's Prometheus metrics (GET /monitoring/prometheus/metrics, text format 0.0.4):
// requests by model, version, API and HTTP status; latency histograms per model and version;
// versions available and load failures per model; and, with batching, batches, rows, padding,
// rejections and the rows waiting.
#pragma once

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "serving/batcher.h"
#include "serving/model_manager.h"

namespace kiln::serving {

class Metrics {
 public:
  // Latency buckets' upper bounds in seconds (Prometheus' "le").
  static constexpr std::array<double, 12> kBuckets = {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
                                                      1e-2, 2.5e-2, 5e-2, 0.1,  0.25,   1.0};

  // `version` "" when the request never reached a version (an unknown model, a bad path).
  void record(const std::string& model, const std::string& version, const std::string& api,
              int status, double seconds);

  std::string prometheus_text(const ModelManager& models, const Batcher* batcher) const;

 private:
  struct Histogram {
    std::array<int64_t, kBuckets.size()> counts{};
    int64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string, int>, int64_t> requests_;
  std::map<std::pair<std::string, std::string>, Histogram> latency_;
};

}  // namespace kiln::serving

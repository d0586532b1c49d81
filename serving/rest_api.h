// TF Serving's REST API over a ModelManager, as a function of the request (method, path,
// body), so it is tested without sockets; serving/http_server.h puts it behind an HTTP server.
//   GET  /v1/models/{name}[/versions/{v}|/labels/{l}]            status
//   GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata   signatures, dtypes, shapes
//   POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict    serving/predict_json.h
//   GET  /monitoring/prometheus/metrics                         serving/metrics.h
// Errors are {"error": "..."} with 400 (bad request), 404 (unknown model, version, label or
// signature), 405, 503 (overloaded) or 500.
#pragma once

#include <string>

#include "serving/batcher.h"
#include "serving/metrics.h"
#include "serving/model_manager.h"

namespace kiln::serving {

struct HttpReply {
  int status = 200;
  std::string body;
};

// With a batcher, predictions go through it (merged with concurrent requests); with metrics,
// every request is counted and timed there, and GET /monitoring/prometheus/metrics shows them.
HttpReply handle_rest(const ModelManager& models, const std::string& method,
                      const std::string& path, const std::string& body, Batcher* batcher = nullptr,
                      Metrics* metrics = nullptr);

// The HTTP status for a kiln::Error code.
int http_status_of(ErrorCode code);

}  // namespace kiln::serving

// The REST API (serving/rest_api.h) behind an HTTP/1.1 server (cpp-httplib: Debian's
// libcpp-httplib-dev, a thread pool over blocking sockets), with the limits a public endpoint
// needs: request body size (413 beyond it), per-connection read and write timeouts, keep-alive
// limits, and a bounded worker pool.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "serving/batcher.h"
#include "serving/metrics.h"
#include "serving/model_manager.h"

namespace kiln::serving {

struct HttpOptions {
  std::string host = "0.0.0.0";
  int port = 8501;  // 0: any free port (see port())
  size_t max_body_bytes = 64 << 20;
  double read_timeout_seconds = 10;   // a client that stops sending is dropped after this
  double write_timeout_seconds = 10;  // ... or stops reading
  double keep_alive_seconds = 30;
  size_t keep_alive_max_requests = 100000;  // per connection
  int threads = 16;
};

class HttpServer {
 public:
  // With a batcher, predictions go through it.
  HttpServer(const ModelManager& models, HttpOptions options, Batcher* batcher = nullptr,
             Metrics* metrics = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the port; throws kiln::Error (kUnavailable) naming host and port when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop() (from another thread or a signal handler's thread).
  void serve();
  // Stops accepting; requests being handled finish first.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  HttpOptions options_;
  int port_ = 0;
};

}  // namespace kiln::serving

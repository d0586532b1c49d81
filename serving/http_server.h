// The REST API (serving/rest_api.h) behind an HTTP/1.1 server on libevent's evhttp (Debian's
// libevent-dev; TF Serving's own HTTP server is built on it too). One event loop owns every
// socket, so idle connections, slow senders and clients that never read cost a few kilobytes
// each, not a thread; predict requests run on a pool of worker threads and their replies go
// back through the loop. The limits a public endpoint needs: request body and header sizes
// (413 beyond them), a per-connection timeout (a client that stops sending, stops reading, or
// idles on a keep-alive connection that long is dropped), a bounded worker pool.
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
  size_t max_header_bytes = 64 << 10;
  double timeout_seconds = 30;  // reading a request, writing a reply, or idle between requests
  int threads = 16;             // workers running predict requests
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
  // Serves until stop() (from any thread).
  void serve();
  // Stops accepting, then lets serve() return once the requests in flight have been answered
  // (or after the timeout, for a client that does not read its reply). Thread-safe.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kiln::serving

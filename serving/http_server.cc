// The REST API behind cpp-httplib (serving/http_server.h).
#include "serving/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>

#include "kiln/error.h"
#include "serving/predict_json.h"
#include "serving/rest_api.h"

namespace kiln::serving {

struct HttpServer::Impl {
  httplib::Server server;
};

namespace {

std::pair<time_t, time_t> split(double seconds) {
  const double whole = std::floor(seconds);
  return {static_cast<time_t>(whole), static_cast<time_t>((seconds - whole) * 1e6)};
}

}  // namespace

HttpServer::HttpServer(const ModelManager& models, HttpOptions options, Batcher* batcher,
                       Metrics* metrics)
    : impl_(std::make_unique<Impl>()), options_(std::move(options)) {
  httplib::Server& s = impl_->server;
  const int threads = std::max(1, options_.threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_payload_max_length(options_.max_body_bytes);
  auto [rs, ru] = split(options_.read_timeout_seconds);
  s.set_read_timeout(rs, ru);
  auto [ws, wu] = split(options_.write_timeout_seconds);
  s.set_write_timeout(ws, wu);
  s.set_keep_alive_timeout(static_cast<time_t>(std::ceil(options_.keep_alive_seconds)));
  // cpp-httplib closes a connection after 5 requests by default; clients reconnecting that
  // often overflow its small listen backlog (dropped SYNs cost a second each).
  s.set_keep_alive_max_count(options_.keep_alive_max_requests);
  s.set_tcp_nodelay(true);
  auto handler = [&models, batcher, metrics](const httplib::Request& req, httplib::Response& res) {
    HttpReply reply = handle_rest(models, req.method, req.path, req.body, batcher, metrics);
    res.status = reply.status;
    const bool text = req.path == "/monitoring/prometheus/metrics" && reply.status == 200;
    res.set_content(reply.body, text ? "text/plain; version=0.0.4" : "application/json");
  };
  s.Get(R"(/v1/.*)", handler);
  s.Get("/monitoring/prometheus/metrics", handler);
  s.Post(R"(/v1/.*)", handler);
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string why = res.status == 413   ? "the request body is larger than the server's limit"
                      : res.status == 404 ? "no such endpoint: " + req.path
                                          : "HTTP " + std::to_string(res.status);
    res.set_content(error_json(why), "application/json");
  });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::bind() {
  httplib::Server& s = impl_->server;
  if (options_.port == 0) {
    port_ = s.bind_to_any_port(options_.host);
  } else {
    port_ = s.bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0)
    throw Error(ErrorCode::kUnavailable, "kiln-serve: cannot listen on " + options_.host + ":" +
                                             std::to_string(options_.port));
}

void HttpServer::serve() { impl_->server.listen_after_bind(); }

void HttpServer::stop() {
  if (impl_->server.is_running()) impl_->server.stop();
}

}  // namespace kiln::serving

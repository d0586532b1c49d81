// The REST API on libevent's evhttp (serving/http_server.h).
//
// Threads: the event loop (serve()'s caller) accepts, reads and parses requests and writes
// replies; status, metadata and metrics are answered there (they only read the manager's
// tables); predict requests go to the worker pool, and a worker hands its reply back to the
// loop with event_base_once (libevent's structures belong to the loop's thread). evhttp reads
// nothing more on a connection while its request is with a worker; a client that went away is
// noticed when its reply is written.
#include "serving/http_server.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/thread.h>
#include <event2/util.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"
#include "serving/predict_json.h"
#include "serving/rest_api.h"

namespace kiln::serving {
namespace {

timeval to_timeval(double seconds) {
  const double whole = std::floor(seconds);
  return {static_cast<time_t>(whole), static_cast<suseconds_t>((seconds - whole) * 1e6)};
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Internal Server Error";
  }
}

std::string method_name(evhttp_cmd_type c) {
  switch (c) {
    case EVHTTP_REQ_GET:
      return "GET";
    case EVHTTP_REQ_POST:
      return "POST";
    case EVHTTP_REQ_HEAD:
      return "HEAD";
    case EVHTTP_REQ_PUT:
      return "PUT";
    case EVHTTP_REQ_DELETE:
      return "DELETE";
    case EVHTTP_REQ_OPTIONS:
      return "OPTIONS";
    case EVHTTP_REQ_TRACE:
      return "TRACE";
    case EVHTTP_REQ_CONNECT:
      return "CONNECT";
    case EVHTTP_REQ_PATCH:
      return "PATCH";
  }
  return "UNKNOWN";
}

}  // namespace

struct HttpServer::Impl {
  const ModelManager& models;
  Batcher* batcher;
  Metrics* metrics;
  HttpOptions options;

  event_base* base = nullptr;
  evhttp* http = nullptr;
  evhttp_bound_socket* bound = nullptr;

  // Loop thread only. in_flight: requests taken whose reply is not yet written out, and whose
  // connection is still open (a closed connection's requests are done: nobody reads them).
  int in_flight = 0;
  std::unordered_map<evhttp_connection*, int> pending;  // in_flight by connection
  bool stopping = false;
  event* deadline = nullptr;  // stop()'s limit on waiting for replies being written
  int with_workers = 0;       // requests handed to the pool whose reply is not back yet

  // The worker pool.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  bool closing = false;
  std::vector<std::thread> workers;

  Impl(const ModelManager& m, HttpOptions o, Batcher* b, Metrics* me)
      : models(m), batcher(b), metrics(me), options(std::move(o)) {}

  void submit(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu);
      jobs.push_back(std::move(job));
    }
    cv.notify_one();
  }

  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return closing || !jobs.empty(); });
        if (jobs.empty()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
  }

  // A reply on its way from a worker to the loop.
  struct Pending {
    Impl* impl;
    evhttp_request* req;
    HttpReply reply;
    bool text;
  };

  void taken(evhttp_request* req) {
    evhttp_connection* conn = evhttp_request_get_connection(req);
    auto [it, fresh] = pending.try_emplace(conn, 0);
    if (fresh) evhttp_connection_set_closecb(conn, &Impl::closed, this);
    ++it->second;
    ++in_flight;
  }

  // The reply is written out (evhttp calls this with the connection still open).
  static void finished(evhttp_request* req, void* arg) {
    Impl* impl = static_cast<Impl*>(arg);
    auto it = impl->pending.find(evhttp_request_get_connection(req));
    if (it != impl->pending.end() && it->second > 0) {
      --it->second;
      --impl->in_flight;
    }
    impl->maybe_exit();
  }

  // A connection closed (by its client, a timeout, or after its last reply): its requests are
  // over, answered or not.
  static void closed(evhttp_connection* conn, void* arg) {
    Impl* impl = static_cast<Impl*>(arg);
    auto it = impl->pending.find(conn);
    if (it == impl->pending.end()) return;
    impl->in_flight -= it->second;
    impl->pending.erase(it);
    impl->maybe_exit();
  }

  void send(evhttp_request* req, const HttpReply& reply, bool text) {
    // A request whose client went away is detached from its connection (already counted out
    // by closed()); evhttp frees it in send_reply.
    if (evhttp_request_get_connection(req) != nullptr)
      evhttp_request_set_on_complete_cb(req, &Impl::finished, this);
    evkeyvalq* headers = evhttp_request_get_output_headers(req);
    evhttp_add_header(headers, "Content-Type",
                      text ? "text/plain; version=0.0.4" : "application/json");
    evbuffer* out = evbuffer_new();
    evbuffer_add(out, reply.body.data(), reply.body.size());
    evhttp_send_reply(req, reply.status, reason_phrase(reply.status), out);
    evbuffer_free(out);
    maybe_exit();
  }

  static void send_pending(evutil_socket_t, short, void* arg) {
    std::unique_ptr<Pending> p(static_cast<Pending*>(arg));
    --p->impl->with_workers;
    p->impl->send(p->req, p->reply, p->text);
  }

  static void on_request(evhttp_request* req, void* arg) {
    Impl* impl = static_cast<Impl*>(arg);
    const std::string method = method_name(evhttp_request_get_command(req));
    std::string path = "/";
    if (const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req)) {
      if (const char* p = evhttp_uri_get_path(uri)) {
        if (char* decoded = evhttp_uridecode(p, 0, nullptr)) {
          path = decoded;
          std::free(decoded);
        }
      }
    }
    evbuffer* in = evhttp_request_get_input_buffer(req);
    std::string body(evbuffer_get_length(in), '\0');
    evbuffer_copyout(in, body.data(), body.size());
    impl->taken(req);
    const bool text = path == "/monitoring/prometheus/metrics";
    if (impl->stopping) {
      evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
      impl->send(req, {503, error_json("the server is shutting down")}, false);
      return;
    }
    if (method != "POST") {  // status, metadata, metrics: quick, answered on the loop
      impl->send(req, handle_rest(impl->models, method, path, body, impl->batcher, impl->metrics),
                 text);
      return;
    }
    ++impl->with_workers;
    impl->submit([impl, req, method, path = std::move(path), body = std::move(body)] {
      auto p = std::make_unique<Pending>(Pending{
          impl, req, handle_rest(impl->models, method, path, body, impl->batcher, impl->metrics),
          false});
      const timeval now{0, 0};
      if (event_base_once(impl->base, -1, EV_TIMEOUT, &Impl::send_pending, p.get(), &now) == 0)
        p.release();
    });
  }

  void maybe_exit() {
    if (stopping && in_flight == 0) event_base_loopexit(base, nullptr);
  }

  // The stop deadline: replies still being written (to clients that do not read) are cut off;
  // predicts still running are waited for (their replies are written, then the loop ends).
  static void on_deadline(evutil_socket_t, short, void* arg) {
    Impl* impl = static_cast<Impl*>(arg);
    if (impl->with_workers > 0) {
      const timeval again{0, 100000};
      evtimer_add(impl->deadline, &again);
      return;
    }
    event_base_loopexit(impl->base, nullptr);
  }

  static void begin_stop(evutil_socket_t, short, void* arg) {
    Impl* impl = static_cast<Impl*>(arg);
    if (impl->stopping) return;
    impl->stopping = true;
    if (impl->bound) {
      evhttp_del_accept_socket(impl->http, impl->bound);
      impl->bound = nullptr;
    }
    // A client that never reads its reply would hold shutdown forever: the timeout bounds it.
    impl->deadline = evtimer_new(impl->base, &Impl::on_deadline, impl);
    const timeval limit = to_timeval(impl->options.timeout_seconds + 0.5);
    evtimer_add(impl->deadline, &limit);
    impl->maybe_exit();
  }
};

HttpServer::HttpServer(const ModelManager& models, HttpOptions options, Batcher* batcher,
                       Metrics* metrics)
    : impl_(std::make_unique<Impl>(models, std::move(options), batcher, metrics)) {
  static const int threads_ready = evthread_use_pthreads();  // before any event_base
  if (threads_ready != 0)
    throw Error(ErrorCode::kInternal, "kiln-serve: libevent has no pthreads support");
  Impl& s = *impl_;
  s.base = event_base_new();
  s.http = s.base ? evhttp_new(s.base) : nullptr;
  if (!s.http) {
    if (s.base) event_base_free(s.base);
    throw Error(ErrorCode::kInternal, "kiln-serve: cannot create an event loop");
  }
  evhttp_set_max_body_size(s.http, static_cast<ev_ssize_t>(s.options.max_body_bytes));
  evhttp_set_max_headers_size(s.http, static_cast<ev_ssize_t>(s.options.max_header_bytes));
  const timeval timeout = to_timeval(s.options.timeout_seconds);
  evhttp_set_timeout_tv(s.http, &timeout);
  // Answer 413 to a body over the limit (draining it) instead of resetting the connection.
  evhttp_set_flags(s.http, EVHTTP_SERVER_LINGERING_CLOSE);
  evhttp_set_allowed_methods(s.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                         EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                         EVHTTP_REQ_PATCH);
  evhttp_set_gencb(s.http, &Impl::on_request, &s);
  const int n = std::max(1, s.options.threads);
  for (int i = 0; i < n; ++i) s.workers.emplace_back([&s] { s.work(); });
}

HttpServer::~HttpServer() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.closing = true;
  }
  s.cv.notify_all();
  for (std::thread& t : s.workers) t.join();
  // Replies the workers posted after the loop ended: hand them to evhttp (which frees them).
  event_base_loop(s.base, EVLOOP_NONBLOCK);
  if (s.deadline) event_free(s.deadline);
  evhttp_free(s.http);
  event_base_free(s.base);
}

void HttpServer::bind() {
  Impl& s = *impl_;
  s.bound = evhttp_bind_socket_with_handle(s.http, s.options.host.c_str(),
                                           static_cast<ev_uint16_t>(s.options.port));
  if (!s.bound)
    throw Error(ErrorCode::kUnavailable, "kiln-serve: cannot listen on " + s.options.host + ":" +
                                             std::to_string(s.options.port) + ": " +
                                             evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(evhttp_bound_socket_get_fd(s.bound), reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void HttpServer::serve() { event_base_dispatch(impl_->base); }

void HttpServer::stop() {
  const timeval now{0, 0};
  event_base_once(impl_->base, -1, EV_TIMEOUT, &Impl::begin_stop, impl_.get(), &now);
}

}  // namespace kiln::serving

// serve_bench (#29): kiln-serve's REST and gRPC APIs under a closed-loop load on loopback. The
// servers (ModelManager + HttpServer / GrpcServer, as kiln-serve runs them) serve the
// Fashion-MNIST MLP's architecture (784 -> Dense(128, relu) -> Dense(10)); 1, 8 and 64
// clients, each with its own connection (REST: a keep-alive connection, row JSON; gRPC: a
// channel of its own, a PredictRequest with tensor_content), send single-example predict
// requests back to back for a bounded time. Clients and server share the host's cores. Reports
// requests/s and p50/p99 latency, the throughput of batching (--enable_batching) over none at
// 64 clients (median and range over alternating rounds), and the microseconds each API adds at
// 1 client over an in-process predict of one example. Prints `RESULT kiln_serve_...` lines
// for benchmarks/run.sh.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/bench_util.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "serving/batcher.h"
#include "serving/grpc_server.h"
#include "serving/http_server.h"
#include "serving/proto/prediction_service.grpc.pb.h"
#include "serving/model_manager.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace serving = kiln::serving;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

struct Load {
  double requests_per_s = 0, p50_us = 0, p99_us = 0;
  int64_t failed = 0;
};

// `clients` closed-loop clients for `seconds`, each request one example. make_client(c) gives
// client c's request function (true when the request succeeded).
template <class MakeClient>
Load run_load(int clients, double seconds, MakeClient make_client) {
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::atomic<int64_t> failed{0};
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto request = make_client(c);
      while (Clock::now() < end) {
        const auto t0 = Clock::now();
        const bool ok = request();
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (!ok) {
          ++failed;
          continue;
        }
        latencies[static_cast<size_t>(c)].push_back(us);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  return {static_cast<double>(all.size()) / seconds, percentile(all, 0.5), percentile(all, 0.99),
          failed.load()};
}

// A REST client on its own keep-alive connection.
auto rest_client(int port, const std::string& body, std::atomic<int64_t>& reported) {
  return [port, &body, &reported](int) {
    auto client = std::make_shared<httplib::Client>("127.0.0.1", port);
    client->set_keep_alive(true);
    client->set_tcp_nodelay(true);  // as curl and gRPC do: no Nagle delay on small requests
    return [client, &body, &reported] {
      auto r = client->Post("/v1/models/mlp:predict", body, "application/json");
      const bool ok = r && r->status == 200;
      if (!ok && reported++ < 3)
        std::fprintf(stderr, "failed request: %s\n",
                     r ? ("HTTP " + std::to_string(r->status) + " " + r->body).c_str()
                       : httplib::to_string(r.error()).c_str());
      return ok;
    };
  };
}

// A gRPC client on a channel (and so a connection) of its own.
auto grpc_client(int port, const tensorflow::serving::PredictRequest& req,
                 std::atomic<int64_t>& reported) {
  return [port, &req, &reported](int) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // no connection shared with others
    auto stub = std::shared_ptr<tensorflow::serving::PredictionService::Stub>(
        tensorflow::serving::PredictionService::NewStub(grpc::CreateCustomChannel(
            "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args)));
    return [stub, &req, &reported] {
      grpc::ClientContext ctx;
      tensorflow::serving::PredictResponse resp;
      grpc::Status s = stub->Predict(&ctx, req, &resp);
      if (!s.ok() && reported++ < 3)
        std::fprintf(stderr, "failed request: %s\n", s.error_message().c_str());
      return s.ok() && resp.outputs_size() == 1;
    };
  };
}

// One example for `model`: the MLP's [1, 784] or the CNN's [1, 28, 28, 1].
tensorflow::serving::PredictRequest example_request(const std::string& model) {
  tensorflow::serving::PredictRequest req;
  req.mutable_model_spec()->set_name(model);
  tensorflow::TensorProto& x = (*req.mutable_inputs())["x"];
  x.set_dtype(tensorflow::DT_FLOAT);
  for (int64_t d : model == "mlp" ? std::vector<int64_t>{1, 784} : std::vector<int64_t>{1, 28, 28, 1})
    x.mutable_tensor_shape()->add_dim()->set_size(d);
  std::vector<float> v(784);
  for (int i = 0; i < 784; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 17) / 17.0f;
  x.set_tensor_content(v.data(), v.size() * sizeof(float));
  return req;
}

std::string example_body() {
  std::string body = "{\"instances\": [[";
  for (int i = 0; i < 784; ++i) body += (i ? ", " : "") + std::to_string((i % 17) / 17.0);
  return body + "]]}";
}

}  // namespace

int main(int argc, char** argv) {
  // serve_bench API batched|unbatched CLIENTS SECONDS [mlp|cnn]: that one load only (for
  // profiling; the CNN over gRPC).
  const bool one_case = argc >= 5;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_serve_bench_" + std::to_string(getpid())))
          .string();
  {
    using namespace kiln::nn;
    Sequential mlp({Dense(128, "relu"), Dense(10)});
    mlp.build({784});
    kiln::io::save_model(mlp, dir + "/mlp", {784});
    // The Fashion-MNIST CNN (examples/fashion_mnist_cnn): compute outweighs the RPC's cost.
    Sequential cnn({Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"),
                    MaxPool2D({2, 2}), Flatten(), Dense(128, "relu"), Dense(10)});
    cnn.build({28, 28, 1});
    kiln::io::save_model(cnn, dir + "/cnn", {28, 28, 1});
  }
  // Batches are padded to these sizes (allowed_batch_sizes), each compiled before serving.
  const std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 32, 64};
  std::vector<serving::ModelSpec> specs;
  for (const char* name : {"mlp", "cnn"}) {
    specs.push_back({.name = name, .base_path = dir + "/" + name});
    specs.back().warmup_batch_sizes = sizes;
  }
  serving::ModelManager models(specs);
  models.poll();
  const std::string body = example_body();
  const tensorflow::serving::PredictRequest request = example_request("mlp");
  const tensorflow::serving::PredictRequest cnn_request = example_request("cnn");
  std::atomic<int64_t> reported{0};
  constexpr double kSeconds = 2.0;

  // One load against a fresh server of `api` ("rest" or "grpc").
  auto serve = [&](const std::string& api, serving::Batcher* batcher, int clients,
                   const tensorflow::serving::PredictRequest* req = nullptr) {
    if (api == "rest") {
      serving::HttpServer server(models, {.host = "127.0.0.1", .port = 0, .threads = 64},
                                 batcher);
      server.bind();
      std::thread t([&] { server.serve(); });
      Load l = run_load(clients, kSeconds, rest_client(server.port(), body, reported));
      server.stop();
      t.join();
      return l;
    }
    serving::GrpcServer server(models, {.host = "127.0.0.1", .port = 0, .max_threads = 128},
                               batcher);
    server.start();
    Load l = run_load(clients, kSeconds, grpc_client(server.port(), req ? *req : request, reported));
    server.stop();
    return l;
  };
  serving::Batcher batcher({.max_batch_size = 64,
                            .batch_timeout_micros = 500,
                            .num_batch_threads = 2,
                            .max_enqueued_batches = 64,
                            .allowed_batch_sizes = sizes});
  if (one_case) {
    const bool batched = std::string(argv[2]) == "batched";
    const std::string api = argv[1];
    const auto t0 = Clock::now();
    Load l;
    while (std::chrono::duration<double>(Clock::now() - t0).count() < std::atof(argv[4]))
      l = serve(api, batched ? &batcher : nullptr, std::atoi(argv[3]),
                argc > 5 && std::string(argv[5]) == "cnn" ? &cnn_request : nullptr);
    std::printf("%s %s %s clients: %.0f requests/s, p50 %.0f us\n", argv[1], argv[2], argv[3],
                l.requests_per_s, l.p50_us);
    std::filesystem::remove_all(dir);
    return 0;
  }
  for (const std::string api : {"rest", "grpc"}) {
    for (int clients : {1, 8, 64}) {
      for (bool batched : {false, true}) {
        Load l = serve(api, batched ? &batcher : nullptr, clients);
        const std::string key = "kiln_serve_" + api + "_" + (batched ? "batched" : "unbatched") +
                                "_c" + std::to_string(clients);
        std::printf(
            "%-4s %s, %2d clients: %8.0f requests/s, p50 %7.0f us, p99 %7.0f us, %lld failed\n",
            api.c_str(), batched ? "batched  " : "unbatched", clients, l.requests_per_s, l.p50_us,
            l.p99_us, static_cast<long long>(l.failed));
        kiln::bench::result(key + "_requests_per_s", l.requests_per_s);
        kiln::bench::result(key + "_p50_us", l.p50_us);
        kiln::bench::result(key + "_p99_us", l.p99_us);
        kiln::bench::result(key + "_failed", static_cast<double>(l.failed));
      }
    }
    // Batched over unbatched at 64 clients, alternating rounds.
    std::vector<double> ratios;
    for (int round = 0; round < 3; ++round) {
      const double u = serve(api, nullptr, 64).requests_per_s;
      const double b = serve(api, &batcher, 64).requests_per_s;
      ratios.push_back(b / u);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("%s batched / unbatched at 64 clients: %.2f (%.2f-%.2f)\n", api.c_str(), ratios[1],
                ratios[0], ratios[2]);
    kiln::bench::result("kiln_serve_" + std::string(api == "rest" ? "" : "grpc_") +
                            "batched_vs_unbatched_c64",
                        ratios[1]);
  }

  // The CNN over gRPC: where a single example's compute (~100 us here) outweighs the RPC.
  {
    std::vector<double> ratios;
    Load u, b;
    for (int round = 0; round < 3; ++round) {
      u = serve("grpc", nullptr, 64, &cnn_request);
      b = serve("grpc", &batcher, 64, &cnn_request);
      ratios.push_back(b.requests_per_s / u.requests_per_s);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("grpc cnn, 64 clients: unbatched %.0f requests/s (p50 %.0f us), batched %.0f (p50 "
                "%.0f us): batched / unbatched %.2f (%.2f-%.2f)\n",
                u.requests_per_s, u.p50_us, b.requests_per_s, b.p50_us, ratios[1], ratios[0],
                ratios[2]);
    kiln::bench::result("kiln_serve_grpc_cnn_unbatched_c64_requests_per_s", u.requests_per_s);
    kiln::bench::result("kiln_serve_grpc_cnn_batched_c64_requests_per_s", b.requests_per_s);
    kiln::bench::result("kiln_serve_grpc_cnn_batched_vs_unbatched_c64", ratios[1]);
  }

  // What the server adds at 1 client: its p50 over an in-process predict of one example.
  auto handle = models.get("mlp", std::nullopt);
  std::map<std::string, kiln::Tensor> one = {{"x", kiln::random_normal({1, 784}, 1)}};
  std::vector<double> inproc;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = Clock::now();
    handle->model_handle.run("serving_default", one);
    inproc.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::vector<double> through_batcher;
  for (int i = 0; i < 500; ++i) {
    const auto t0 = Clock::now();
    batcher.run(handle, "serving_default", one);
    through_batcher.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::printf("in-process predict through the batcher (timeout %lld us): p50 %.0f us\n",
              static_cast<long long>(batcher.options().batch_timeout_micros),
              percentile(through_batcher, 0.5));
  const double local_p50 = percentile(inproc, 0.5);
  kiln::bench::result("kiln_serve_inprocess_p50_us", local_p50);
  for (const std::string api : {"rest", "grpc"}) {
    const double p50 = serve(api, nullptr, 1).p50_us;
    std::printf("1 client: %s p50 %.0f us, in-process predict p50 %.0f us: the server adds %.0f us\n",
                api.c_str(), p50, local_p50, p50 - local_p50);
    kiln::bench::result("kiln_serve_" + api + "_overhead_us", p50 - local_p50);
  }

  // 1000 idle connections held open on the REST server: 1 client's p50 with them over without
  // (the event loop should not care), alternating rounds.
  {
    rlimit files{};
    getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
    serving::HttpServer server(models, {.host = "127.0.0.1", .port = 0});
    server.bind();
    std::thread t([&] { server.serve(); });
    std::vector<double> ratios;
    int idle_open = 0;
    for (int round = 0; round < 3; ++round) {
      const double without = run_load(1, 1.0, rest_client(server.port(), body, reported)).p50_us;
      std::vector<int> idle;
      for (int i = 0; i < 1000; ++i) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(server.port()));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0) break;
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
          close(fd);
          break;
        }
        idle.push_back(fd);
      }
      idle_open = static_cast<int>(idle.size());
      const double with = run_load(1, 1.0, rest_client(server.port(), body, reported)).p50_us;
      for (int fd : idle) close(fd);
      ratios.push_back(with / without);
    }
    server.stop();
    t.join();
    std::sort(ratios.begin(), ratios.end());
    std::printf("rest, 1 client, p50 with %d idle connections over none: %.2f (%.2f-%.2f)\n",
                idle_open, ratios[1], ratios[0], ratios[2]);
    kiln::bench::result("kiln_serve_rest_p50_1000_idle_vs_none", ratios[1]);
  }
  std::filesystem::remove_all(dir);
  return 0;
}

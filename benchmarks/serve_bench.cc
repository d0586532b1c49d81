// serve_bench (#29): kiln-serve's REST API under a closed-loop load on loopback. The server
// (ModelManager + HttpServer, as kiln-serve runs them) serves the Fashion-MNIST MLP's
// architecture (784 -> Dense(128, relu) -> Dense(10)); 1, 8 and 64 clients, each with its own
// keep-alive connection, send single-example row predict requests back to back for a bounded
// time. Clients and server share the host's cores. Reports requests/s and p50/p99 latency, the
// throughput of batching (--enable_batching) over none at 64 clients (median and range over
// alternating rounds), and the microseconds the server adds at 1 client over an in-process
// predict of one example. Prints `RESULT kiln_serve_...` lines for benchmarks/run.sh.
#include <httplib.h>

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
#include "serving/http_server.h"
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

// `clients` closed-loop clients for `seconds`, each request one example.
Load run_load(int port, int clients, double seconds, const std::string& body) {
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::atomic<int64_t> failed{0};
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);  // as curl and gRPC do: no Nagle delay on small requests
      while (Clock::now() < end) {
        const auto t0 = Clock::now();
        auto r = client.Post("/v1/models/mlp:predict", body, "application/json");
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (!r || r->status != 200) {
          if (failed++ < 3)
            std::fprintf(stderr, "failed request: %s\n",
                         r ? ("HTTP " + std::to_string(r->status) + " " + r->body).c_str()
                           : httplib::to_string(r.error()).c_str());
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

std::string example_body() {
  std::string body = "{\"instances\": [[";
  for (int i = 0; i < 784; ++i) body += (i ? ", " : "") + std::to_string((i % 17) / 17.0);
  return body + "]]}";
}

}  // namespace

int main() {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_serve_bench_" + std::to_string(getpid())))
          .string();
  {
    kiln::nn::Sequential model({kiln::nn::Dense(128, "relu"), kiln::nn::Dense(10)});
    model.build({784});
    kiln::io::save_model(model, dir, {784});
  }
  serving::ModelSpec spec{.name = "mlp", .base_path = dir};
  spec.warmup_batch_sizes = {1, 64};
  serving::ModelManager models({spec});
  models.poll();
  const std::string body = example_body();
  constexpr double kSeconds = 2.0;

  auto serve = [&](serving::Batcher* batcher, int clients) {
    serving::HttpServer server(models, {.host = "127.0.0.1", .port = 0, .threads = 64}, batcher);
    server.bind();
    std::thread t([&] { server.serve(); });
    Load l = run_load(server.port(), clients, kSeconds, body);
    server.stop();
    t.join();
    return l;
  };
  serving::Batcher batcher({.max_batch_size = 64,
                            .batch_timeout_micros = 500,
                            .num_batch_threads = 2,
                            .max_enqueued_batches = 64});
  for (int clients : {1, 8, 64}) {
    for (bool batched : {false, true}) {
      Load l = serve(batched ? &batcher : nullptr, clients);
      const std::string key = std::string("kiln_serve_rest_") +
                              (batched ? "batched" : "unbatched") + "_c" + std::to_string(clients);
      std::printf(
          "REST %s, %2d clients: %8.0f requests/s, p50 %7.0f us, p99 %7.0f us, %lld failed\n",
          batched ? "batched  " : "unbatched", clients, l.requests_per_s, l.p50_us, l.p99_us,
          static_cast<long long>(l.failed));
      kiln::bench::result(key + "_requests_per_s", l.requests_per_s);
      kiln::bench::result(key + "_p50_us", l.p50_us);
      kiln::bench::result(key + "_p99_us", l.p99_us);
    }
  }
  // Batched over unbatched at 64 clients, alternating rounds.
  std::vector<double> ratios;
  for (int round = 0; round < 3; ++round) {
    const double u = serve(nullptr, 64).requests_per_s;
    const double b = serve(&batcher, 64).requests_per_s;
    ratios.push_back(b / u);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("batched / unbatched at 64 clients: %.2f (%.2f-%.2f)\n", ratios[1], ratios[0],
              ratios[2]);
  kiln::bench::result("kiln_serve_batched_vs_unbatched_c64", ratios[1]);

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
  const double rest_p50 = serve(nullptr, 1).p50_us, local_p50 = percentile(inproc, 0.5);
  std::printf(
      "1 client: REST p50 %.0f us, in-process predict p50 %.0f us: the server adds %.0f us\n",
      rest_p50, local_p50, rest_p50 - local_p50);
  kiln::bench::result("kiln_serve_inprocess_p50_us", local_p50);
  kiln::bench::result("kiln_serve_rest_overhead_us", rest_p50 - local_p50);
  std::filesystem::remove_all(dir);
  return 0;
}

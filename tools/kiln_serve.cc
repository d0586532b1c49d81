// kiln-serve: serves models written by kiln::io::save_model over TF Serving's gRPC and REST APIs.
//   kiln-serve --model_name=NAME --model_base_path=DIR [--port=8500] [--rest_api_port=8501]
//   kiln-serve --model_config_file=FILE (TF Serving's ModelServerConfig, text format)
// New versions under a base path are loaded and warmed up before they serve; SIGTERM or SIGINT
// stops accepting, finishes the requests in flight and exits 0.
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "kiln/error.h"
#include "serving/grpc_server.h"
#include "serving/http_server.h"
#include "serving/model_manager.h"

namespace {

constexpr const char* kUsage =
    "usage: kiln-serve --model_name=NAME --model_base_path=DIR | --model_config_file=FILE\n"
    "  [--port=8500] [--grpc_max_threads=16] [--grpc_host=0.0.0.0]\n"
    "  [--rest_api_port=8501] [--rest_api_host=0.0.0.0] [--rest_api_num_threads=16]\n"
    "  [--rest_api_timeout_in_ms=30000] [--max_request_bytes=67108864]\n"
    "  [--file_system_poll_wait_seconds=1] [--warmup_batch_sizes=1,8]\n"
    "  [--enable_batching=true [--batching_parameters_file=FILE]]\n";

std::map<std::string, std::string> parse_flags(int argc, char** argv) {
  static const char* known[] = {"model_name",
                                "model_base_path",
                                "model_config_file",
                                "rest_api_port",
                                "rest_api_host",
                                "rest_api_num_threads",
                                "rest_api_timeout_in_ms",
                                "max_request_bytes",
                                "file_system_poll_wait_seconds",
                                "warmup_batch_sizes",
                                "enable_batching",
                                "batching_parameters_file",
                                "port",
                                "grpc_host",
                                "grpc_max_threads"};
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos)
      throw kiln::Error(kiln::ErrorCode::kInvalidArgument, "'" + a + "' is not --flag=value");
    std::string key = a.substr(2, eq - 2);
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    if (!ok) throw kiln::Error(kiln::ErrorCode::kInvalidArgument, "unknown flag --" + key);
    flags[key] = a.substr(eq + 1);
  }
  return flags;
}

double number(const std::map<std::string, std::string>& f, const std::string& key,
              double fallback) {
  auto it = f.find(key);
  if (it == f.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end != '\0' || v < 0)
    throw kiln::Error(kiln::ErrorCode::kInvalidArgument,
                      "--" + key + "=" + it->second + " is not a non-negative number");
  return v;
}

// A TCP port: a whole number in [0, 65535] (0: any free port).
int port_flag(const std::map<std::string, std::string>& f, const std::string& key, int fallback) {
  const double v = number(f, key, fallback);
  if (v != static_cast<double>(static_cast<int>(v)) || v > 65535)
    throw kiln::Error(kiln::ErrorCode::kInvalidArgument,
                      "--" + key + "=" + f.at(key) + " is not a port (a whole number 0-65535)");
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  // Signals are taken by one thread (sigwait), never by a handler interrupting a request.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that goes away is an error on its socket only
  // Every connection is a descriptor: allow as many as the hard limit does (often 1024 soft).
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  try {
    auto flags = parse_flags(argc, argv);
    std::vector<kiln::serving::ModelSpec> specs;
    if (flags.count("model_config_file")) {
      if (flags.count("model_name") || flags.count("model_base_path"))
        throw kiln::Error(kiln::ErrorCode::kInvalidArgument,
                          "give --model_config_file or --model_name/--model_base_path, not both");
      specs = kiln::serving::read_model_config_file(flags["model_config_file"]);
    } else {
      if (!flags.count("model_base_path"))
        throw kiln::Error(
            kiln::ErrorCode::kInvalidArgument,
            std::string("no model: give --model_base_path or --model_config_file\n") + kUsage);
      kiln::serving::ModelSpec s;
      s.name = flags.count("model_name") ? flags["model_name"] : "default";
      s.base_path = flags["model_base_path"];
      specs.push_back(s);
    }
    if (flags.count("warmup_batch_sizes")) {
      std::vector<int64_t> sizes;
      const std::string& list = flags["warmup_batch_sizes"];
      for (size_t b = 0, e; b < list.size(); b = e + 1) {
        e = std::min(list.find(',', b), list.size());
        const std::string item = list.substr(b, e - b);
        char* end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 1)
          throw kiln::Error(
              kiln::ErrorCode::kInvalidArgument,
              "--warmup_batch_sizes=" + list + ": '" + item + "' is not a positive batch size");
        sizes.push_back(v);
      }
      for (auto& s : specs) s.warmup_batch_sizes = sizes;
    }

    std::unique_ptr<kiln::serving::Batcher> batcher;
    if (flags.count("enable_batching") && flags["enable_batching"] == "true") {
      kiln::serving::BatchingOptions options;
      if (flags.count("batching_parameters_file"))
        options = kiln::serving::read_batching_parameters_file(flags["batching_parameters_file"]);
      batcher = std::make_unique<kiln::serving::Batcher>(options);
      // Warm-up compiles the batch sizes a batch can have.
      std::vector<int64_t> sizes = options.allowed_batch_sizes;
      if (sizes.empty()) sizes = {1, options.max_batch_size};
      if (!flags.count("warmup_batch_sizes"))
        for (auto& s : specs) s.warmup_batch_sizes = sizes;
    } else if (flags.count("batching_parameters_file")) {
      throw kiln::Error(kiln::ErrorCode::kInvalidArgument,
                        "--batching_parameters_file needs --enable_batching=true");
    }
    kiln::serving::ModelManager models(specs);
    models.poll();
    for (const std::string& name : models.models()) {
      for (const auto& v : models.status(name, std::nullopt)) {
        std::fprintf(stderr, "kiln-serve: model %s version %lld: %s%s%s\n", name.c_str(),
                     static_cast<long long>(v.version), kiln::serving::state_name(v.state),
                     v.error.empty() ? "" : ": ", v.error.c_str());
      }
    }
    models.start_polling(number(flags, "file_system_poll_wait_seconds", 1));

    kiln::serving::HttpOptions http;
    http.port = port_flag(flags, "rest_api_port", 8501);
    if (flags.count("rest_api_host")) http.host = flags["rest_api_host"];
    http.threads = static_cast<int>(number(flags, "rest_api_num_threads", 16));
    http.timeout_seconds = number(flags, "rest_api_timeout_in_ms", 30000) / 1000;
    http.max_body_bytes = static_cast<size_t>(number(flags, "max_request_bytes", 64 << 20));
    kiln::serving::Metrics metrics;
    kiln::serving::GrpcOptions grpc;
    grpc.port = port_flag(flags, "port", 8500);
    if (flags.count("grpc_host")) grpc.host = flags["grpc_host"];
    grpc.max_threads = static_cast<int>(number(flags, "grpc_max_threads", 16));
    grpc.max_message_bytes = http.max_body_bytes;
    kiln::serving::GrpcServer grpc_server(models, grpc, batcher.get(), &metrics);
    grpc_server.start();
    std::fprintf(stderr, "kiln-serve: gRPC API at %s:%d\n", grpc.host.c_str(), grpc_server.port());
    kiln::serving::HttpServer server(models, http, batcher.get(), &metrics);
    server.bind();
    std::fprintf(stderr, "kiln-serve: REST API at http://%s:%d/v1/models/\n", http.host.c_str(),
                 server.port());
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      std::fprintf(stderr, "kiln-serve: signal %d: finishing requests in flight\n", sig);
      server.stop();
      grpc_server.stop(http.timeout_seconds);
    });
    server.serve();
    // serve() returned: stopped by the signal thread (or the socket failed; then end it too).
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    grpc_server.stop(http.timeout_seconds);
    models.stop();
    std::fprintf(stderr, "kiln-serve: stopped\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-serve: %s\n", e.what());
    return 1;
  }
}

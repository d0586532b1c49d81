// kiln-serve as a process: started on a model directory, called over loopback HTTP (status,
// predict, metrics, a body over the size limit, a client that stalls mid-request), a new version
// picked up by polling and a corrupt one refused with no request failing, SIGTERM ending it with
// exit status 0, and a restart after SIGKILL.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/tcp.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <regex>
#include <thread>

#include "kiln/nn.h"
#include "serving/proto/prediction_service.grpc.pb.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace kiln::serving {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class KilnServeTest : public testing_util::TempDirTest {
 protected:
  void save_version(float w) {
    nn::Sequential model({nn::Dense(2, "", false)});
    model.build({3});
    for (Variable v : model.weights()) v.assign(full(v.value().shape(), w));
    io::save_model(model, path("m"), {3});
  }
  // Starts the server on free ports; returns the REST port (0 when it did not start) and sets
  // grpc_port_.
  int start(std::vector<std::string> extra = {}) {
    log_ = path("serve.log");
    std::vector<std::string> args = {KILN_SERVE,
                                     "--model_name=mnist",
                                     "--model_base_path=" + path("m"),
                                     "--rest_api_port=0",
                                     "--port=0",
                                     "--file_system_poll_wait_seconds=0.2",
                                     "--rest_api_timeout_in_ms=1000",
                                     "--max_request_bytes=4096"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = testing_util::spawn_process(args, log_);
    if (!testing_util::wait_for_output(pid_, log_, "/v1/models/", std::chrono::seconds(60)))
      return 0;
    std::smatch m;
    std::string out = read_file(log_);
    if (!std::regex_search(out, m, std::regex(R"(gRPC API at [0-9.]+:(\d+))"))) return 0;
    grpc_port_ = std::stoi(m[1]);
    if (!std::regex_search(out, m, std::regex(R"(http://[0-9.]+:(\d+)/)"))) return 0;
    return std::stoi(m[1]);
  }
  // A gRPC Predict of [[x, x, x]]: the first output's values, empty on failure.
  std::vector<float> grpc_predict(float x) {
    auto stub = tensorflow::serving::PredictionService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(grpc_port_), grpc::InsecureChannelCredentials()));
    tensorflow::serving::PredictRequest req;
    req.mutable_model_spec()->set_name("mnist");
    tensorflow::TensorProto& t = (*req.mutable_inputs())["x"];
    t.set_dtype(tensorflow::DT_FLOAT);
    t.mutable_tensor_shape()->add_dim()->set_size(1);
    t.mutable_tensor_shape()->add_dim()->set_size(3);
    for (int i = 0; i < 3; ++i) t.add_float_val(x);
    tensorflow::serving::PredictResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s = stub->Predict(&ctx, req, &resp);
    if (!s.ok() || resp.outputs().empty()) {
      ADD_FAILURE() << s.error_message();
      return {};
    }
    const std::string& c = resp.outputs().begin()->second.tensor_content();
    std::vector<float> out(c.size() / sizeof(float));
    std::memcpy(out.data(), c.data(), c.size());
    return out;
  }
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  std::string log_;
};

TEST_F(KilnServeTest, ServesRequestsReloadsAndStopsCleanlyOnSigterm) {
  save_version(1);
  const int port = start();
  ASSERT_GT(port, 0) << read_file(log_);
  // kiln-serve's REST_API port 0 binds any free port: its log names it. (The flag is ours; TF
  // Serving's default is 8501.)
  httplib::Client client("127.0.0.1", port);
  auto status = client.Get("/v1/models/mnist");
  ASSERT_TRUE(status) << read_file(log_);
  EXPECT_EQ(status->status, 200);
  EXPECT_THAT(status->body, HasSubstr("\"AVAILABLE\""));
  auto predict =
      client.Post("/v1/models/mnist:predict", R"({"instances": [[1, 1, 1]]})", "application/json");
  ASSERT_TRUE(predict);
  EXPECT_EQ(predict->body, R"({"predictions": [[3, 3]]})");
  EXPECT_EQ(grpc_predict(2), (std::vector<float>{6, 6}));

  auto metrics = client.Get("/monitoring/prometheus/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(
      metrics->body,
      HasSubstr(
          R"(kiln_serving_requests_total{model="mnist",version="1",api="predict",status="200"} 1)"));

  auto big = client.Post("/v1/models/mnist:predict", std::string(10000, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);

  {  // a client that sends half a request and stalls is dropped; others are still served
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const char half[] = "POST /v1/models/mnist:predict HTTP/1.1\r\nHost: x\r\n";
    ASSERT_GT(send(fd, half, sizeof half - 1, 0), 0);
    auto during = client.Get("/v1/models/mnist");
    ASSERT_TRUE(during);
    EXPECT_EQ(during->status, 200);
    close(fd);
  }

  save_version(2);
  bool switched = false;
  for (int i = 0; i < 200 && !switched; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = client.Post("/v1/models/mnist:predict", R"({"instances": [[1, 1, 1]]})",
                         "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;  // never a failed request during the reload
    switched = r->body == R"({"predictions": [[6, 6]]})";
    const std::vector<float> g = grpc_predict(1);  // nor a failed gRPC call
    EXPECT_TRUE(g == std::vector<float>({3, 3}) || g == std::vector<float>({6, 6})) << g.size();
  }
  EXPECT_TRUE(switched) << read_file(log_);

  // A corrupt version 3 arrives and version 2's directory goes, under load: not one request
  // fails; version 3 shows in the status with its error, and version 2 (loaded) keeps serving,
  // since no version the policy wants has loaded.
  fs::create_directories(path("m/3/variables"));
  testing_util::write_file(path("m/3/saved_model.pb"), "corrupt");
  fs::remove_all(path("m/2"));
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    auto r = client.Post("/v1/models/mnist:predict", R"({"instances": [[1, 1, 1]]})",
                         "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, R"({"predictions": [[6, 6]]})");
    if (i % 4 == 0) EXPECT_EQ(grpc_predict(1), (std::vector<float>{6, 6}));  // gRPC too
  }
  auto v3 = client.Get("/v1/models/mnist/versions/3");
  ASSERT_TRUE(v3);
  EXPECT_THAT(v3->body, HasSubstr(R"("state": "END")"));
  EXPECT_THAT(v3->body, HasSubstr("saved_model.pb"));

  kill(pid_, SIGTERM);
  testing_util::ProcessResult done = testing_util::wait_process(pid_, log_);
  EXPECT_TRUE(done.exited_ok()) << done.output;
  EXPECT_THAT(done.output, HasSubstr("kiln-serve: stopped"));
}

TEST_F(KilnServeTest, KilledWithSigkillItServesAgainWhenRestarted) {
  save_version(1);
  int port = start();
  ASSERT_GT(port, 0) << read_file(log_);
  kill(pid_, SIGKILL);
  testing_util::ProcessResult killed = testing_util::wait_process(pid_, log_);
  EXPECT_TRUE(killed.killed_by(SIGKILL));
  port = start();  // the same model directory, no manual steps
  ASSERT_GT(port, 0) << read_file(log_);
  httplib::Client client("127.0.0.1", port);
  auto r =
      client.Post("/v1/models/mnist:predict", R"({"instances": [[1, 1, 1]]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, R"({"predictions": [[3, 3]]})");
  kill(pid_, SIGTERM);
  EXPECT_TRUE(testing_util::wait_process(pid_, log_).exited_ok());
}

// A loopback TCP connection to `port` (-1 when it cannot connect).
int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

TEST_F(KilnServeTest, IdleSlowAndNonReadingClientsDoNotStopOthersBeingServed) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_max < 1100) GTEST_SKIP() << "the hard limit on open files is below 1100";
  files.rlim_cur = files.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  save_version(1);
  const int port = start({"--rest_api_timeout_in_ms=60000", "--enable_batching=true"});
  ASSERT_GT(port, 0) << read_file(log_);
  auto served = [&] {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(30, 0);
    auto r = client.Post("/v1/models/mnist:predict", R"({"instances": [[1, 1, 1]]})",
                         "application/json");
    return r && r->status == 200 && r->body == R"({"predictions": [[3, 3]]})";
  };
  ASSERT_TRUE(served());

  std::vector<int> idle;  // 1000 connections that send nothing
  for (int i = 0; i < 1000; ++i) {
    const int fd = connect_to(port);
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    idle.push_back(fd);
  }
  // One that sends its headers a byte at a time (and is still sending).
  const int slow = connect_to(port);
  ASSERT_GE(slow, 0);
  const std::string head = "POST /v1/models/mnist:predict HTTP/1.1\r\nHost: x\r\n";
  for (char c : head) ASSERT_EQ(send(slow, &c, 1, 0), 1);
  // One that asks for many replies and never reads them: its socket buffers fill up.
  const int deaf = connect_to(port);
  ASSERT_GE(deaf, 0);
  int small = 4096;
  setsockopt(deaf, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  fcntl(deaf, F_SETFL, O_NONBLOCK);
  std::string burst;
  for (int i = 0; i < 2000; ++i) burst += "GET /monitoring/prometheus/metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  size_t sent = 0;
  for (int tries = 0; sent < burst.size() && tries < 1000; ++tries) {
    const ssize_t n = send(deaf, burst.data() + sent, burst.size() - sent, MSG_NOSIGNAL);
    if (n > 0) sent += static_cast<size_t>(n);
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  for (int i = 0; i < 20; ++i) ASSERT_TRUE(served()) << "request " << i << "\n" << read_file(log_);
  EXPECT_EQ(grpc_predict(1), (std::vector<float>{3, 3}));
  auto status = httplib::Client("127.0.0.1", port).Get("/v1/models/mnist");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);

  for (int fd : idle) close(fd);
  close(slow);
  close(deaf);
  ASSERT_TRUE(served());
  kill(pid_, SIGTERM);
  testing_util::ProcessResult done = testing_util::wait_process(pid_, log_);
  EXPECT_TRUE(done.exited_ok()) << done.output;
}

TEST_F(KilnServeTest, BadFlagsAndAMissingModelAreClearErrors) {
  testing_util::ProcessResult r =
      testing_util::run_process({KILN_SERVE, "--model_base_pth=x"}, path("a.log"));
  EXPECT_FALSE(r.exited_ok());
  EXPECT_THAT(r.output, HasSubstr("unknown flag --model_base_pth"));
  r = testing_util::run_process({KILN_SERVE, "--model_config_file=" + path("none.conf")},
                                path("b.log"));
  EXPECT_FALSE(r.exited_ok());
  EXPECT_THAT(r.output, HasSubstr("model config file '" + path("none.conf") + "' cannot be read"));
  save_version(1);
  r = testing_util::run_process(
      {KILN_SERVE, "--model_base_path=" + path("m"), "--rest_api_port=0", "--port=70000"},
      path("c.log"));
  EXPECT_FALSE(r.exited_ok());
  EXPECT_THAT(r.output, HasSubstr("--port=70000 is not a port (a whole number 0-65535)"));
}

}  // namespace
}  // namespace kiln::serving

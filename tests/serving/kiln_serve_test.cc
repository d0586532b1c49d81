// kiln-serve as a process: started on a model directory, called over loopback HTTP (status,
// predict, metrics, a body over the size limit, a client that stalls mid-request), a new version
// picked up by polling and a corrupt one refused with no request failing, SIGTERM ending it with
// exit status 0, and a restart after SIGKILL.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <filesystem>
#include <regex>
#include <thread>

#include "kiln/nn.h"
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
  // Starts the server on a free port; returns the port (0 when it did not start).
  int start() {
    log_ = path("serve.log");
    pid_ = testing_util::spawn_process(
        {KILN_SERVE, "--model_name=mnist", "--model_base_path=" + path("m"), "--rest_api_port=0",
         "--file_system_poll_wait_seconds=0.2", "--rest_api_timeout_in_ms=1000",
         "--max_request_bytes=4096"},
        log_);
    if (!testing_util::wait_for_output(pid_, log_, "/v1/models/", std::chrono::seconds(60)))
      return 0;
    std::smatch m;
    std::string out = read_file(log_);
    if (!std::regex_search(out, m, std::regex(R"(http://[0-9.]+:(\d+)/)"))) return 0;
    return std::stoi(m[1]);
  }
  pid_t pid_ = -1;
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

TEST_F(KilnServeTest, BadFlagsAndAMissingModelAreClearErrors) {
  testing_util::ProcessResult r =
      testing_util::run_process({KILN_SERVE, "--model_base_pth=x"}, path("a.log"));
  EXPECT_FALSE(r.exited_ok());
  EXPECT_THAT(r.output, HasSubstr("unknown flag --model_base_pth"));
  r = testing_util::run_process({KILN_SERVE, "--model_config_file=" + path("none.conf")},
                                path("b.log"));
  EXPECT_FALSE(r.exited_ok());
  EXPECT_THAT(r.output, HasSubstr("model config file '" + path("none.conf") + "' cannot be read"));
}

}  // namespace
}  // namespace kiln::serving

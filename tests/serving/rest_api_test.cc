// TF Serving's REST endpoints over a model manager: status, metadata, predict (row and
// columnar, by version and label), and the HTTP status of each kind of bad request; after
// every bad request the model still answers.
#include "serving/rest_api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/nn.h"
#include "tests/serving/two_versions.h"
#include "tests/testing/temp_dir.h"

namespace kiln::serving {
namespace {

using ::testing::HasSubstr;

class RestApiTest : public testing_util::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    mm_ = testing_util::two_versions(path("m"));
  }
  HttpReply get(const std::string& path) { return handle_rest(*mm_, "GET", path, ""); }
  HttpReply post(const std::string& path, const std::string& body) {
    return handle_rest(*mm_, "POST", path, body);
  }
  void expect_still_serving() {
    HttpReply r = post("/v1/models/m:predict", R"({"instances": [[1, 1, 1]]})");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, R"({"predictions": [[6, 6]]})");
  }
  std::unique_ptr<ModelManager> mm_;
};

TEST_F(RestApiTest, StatusAndMetadata) {
  HttpReply r = get("/v1/models/m");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"model_version_status": [{"version": "2", "state": "AVAILABLE", "status": )"
                    R"({"error_code": "OK", "error_message": ""}}, {"version": "1", "state": )"
                    R"("AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]})");
  r = get("/v1/models/m/labels/stable");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.body, HasSubstr(R"("version": "1")"));
  r = get("/v1/models/m/versions/2/metadata");
  EXPECT_EQ(r.status, 200);
  EXPECT_THAT(r.body,
              HasSubstr(R"("model_spec": {"name": "m", "signature_name": "", "version": "2"})"));
  EXPECT_THAT(
      r.body,
      HasSubstr(
          R"("x": {"dtype": "DT_FLOAT", "tensor_shape": {"dim": [{"size": "-1", "name": ""}, {"size": "3", "name": ""}])"));
  EXPECT_THAT(r.body, HasSubstr(R"("method_name": "tensorflow/serving/predict")"));
}

TEST_F(RestApiTest, PredictsInRowAndColumnarFormByVersionAndLabel) {
  expect_still_serving();  // the newest version: kernel of 2s
  HttpReply r = post("/v1/models/m/versions/1:predict", R"({"inputs": [[1, 2, 3], [0, 0, 1]]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"outputs": [[6, 6], [1, 1]]})");
  r = post("/v1/models/m/labels/stable:predict",
           R"({"signature_name": "serving_default", "instances": [{"x": [1, 1, 1]}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"predictions": [[3, 3]]})");
}

TEST_F(RestApiTest, BadRequestsGetTheRightStatusAndTheServerKeepsServing) {
  struct Case {
    std::string method, path, body;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"POST", "/v1/models/m:predict", "{\"instances\": [[1, 1", 400, "not valid JSON"},
      {"POST", "/v1/models/m:predict", R"({"instances": [[1, 1]]})", 400,
       "input 'x' has shape [1,2], but the signature wants f32[-1,3]"},
      {"POST", "/v1/models/m:predict", R"({"instances": [[true, 1, 1]]})", 400,
       "input 'x' is f32, but a boolean was given"},
      {"POST", "/v1/models/m:predict", R"({"instances": [[1, 1, 1], [1, 1]]})", 400, "ragged"},
      {"POST", "/v1/models/m:predict", R"({"inputs": {"x": [[1,1,1]], "y": [1]}})", 400,
       "input 'y' is not one of the signature's inputs"},
      {"POST", "/v1/models/nope:predict", R"({"instances": [[1, 1, 1]]})", 404,
       "model 'nope' is not served here"},
      {"POST", "/v1/models/m/versions/7:predict", R"({"instances": [[1, 1, 1]]})", 404,
       "Specific(m, 7)"},
      {"POST", "/v1/models/m/labels/beta:predict", R"({"instances": [[1, 1, 1]]})", 404,
       "no version label 'beta'"},
      {"POST", "/v1/models/m:predict", R"({"signature_name": "s", "instances": [[1, 1, 1]]})", 404,
       "signature 's' is not one of the model's"},
      {"POST", "/v1/models/m:classify", "{}", 404, "':classify' is not supported"},
      {"GET", "/v1/models/m:predict", "", 405, "takes a POST"},
      {"POST", "/v1/models/m", "", 405, "takes a GET"},
      {"GET", "/v1/models/m/versions/x", "", 404, "version 'x' is not a number"},
      {"GET", "/v1/models/m/versions/9", "", 404, "Could not find version 9"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.method + " " + c.path + " " + c.body);
    HttpReply r = handle_rest(*mm_, c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status);
    EXPECT_THAT(r.body, HasSubstr(c.says));
    EXPECT_EQ(r.body.rfind("{\"error\": ", 0), 0u) << r.body;
    expect_still_serving();
  }
}

TEST_F(RestApiTest, PredictionsThroughTheBatcherAreTheSame) {
  Batcher batcher({.max_batch_size = 4, .batch_timeout_micros = 100});
  HttpReply r = handle_rest(*mm_, "POST", "/v1/models/m/versions/1:predict",
                            R"({"inputs": [[1, 2, 3], [0, 0, 1]]})", &batcher);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"outputs": [[6, 6], [1, 1]]})");
  EXPECT_EQ(batcher.stats().requests, 1);
}

TEST_F(RestApiTest, PrometheusMetricsCountRequestsAndTimeThem) {
  Metrics metrics;
  Batcher batcher({.max_batch_size = 4, .batch_timeout_micros = 100});
  auto call = [&](const std::string& method, const std::string& path, const std::string& body) {
    return handle_rest(*mm_, method, path, body, &batcher, &metrics);
  };
  EXPECT_EQ(call("POST", "/v1/models/m:predict", R"({"instances": [[1, 1, 1]]})").status, 200);
  EXPECT_EQ(call("POST", "/v1/models/m:predict", R"({"instances": [[1, 1, 1]]})").status, 200);
  EXPECT_EQ(call("POST", "/v1/models/m:predict", R"({"instances": [[1, 1]]})").status, 400);
  EXPECT_EQ(call("GET", "/v1/models/nope", "").status, 404);
  HttpReply r = call("GET", "/monitoring/prometheus/metrics", "");
  ASSERT_EQ(r.status, 200);
  EXPECT_THAT(r.body, HasSubstr("# TYPE kiln_serving_requests_total counter\n"));
  EXPECT_THAT(
      r.body,
      HasSubstr(
          R"(kiln_serving_requests_total{model="m",version="2",api="predict",status="200"} 2)"));
  EXPECT_THAT(
      r.body,
      HasSubstr(
          R"(kiln_serving_requests_total{model="m",version="2",api="predict",status="400"} 1)"));
  EXPECT_THAT(
      r.body,
      HasSubstr(
          R"(kiln_serving_requests_total{model="nope",version="",api="status",status="404"} 1)"));
  EXPECT_THAT(
      r.body,
      HasSubstr(
          R"(kiln_serving_request_latency_seconds_bucket{model="m",version="2",le="+Inf"} 3)"));
  EXPECT_THAT(r.body,
              HasSubstr(R"(kiln_serving_request_latency_seconds_count{model="m",version="2"} 3)"));
  EXPECT_THAT(r.body, HasSubstr(R"(kiln_serving_versions_available{model="m"} 2)"));
  EXPECT_THAT(r.body, HasSubstr("kiln_serving_load_failures_total 0\n"));
  EXPECT_THAT(r.body, HasSubstr("kiln_serving_batched_requests_total 2\n"));
  EXPECT_THAT(r.body, HasSubstr("kiln_serving_queued_rows 0\n"));
}

}  // namespace
}  // namespace kiln::serving

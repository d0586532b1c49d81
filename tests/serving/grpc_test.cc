// TF Serving's gRPC API: the services' logic over a model manager, and GrpcServer called over
// loopback through the generated stubs (as a TF Serving client calls it): predict with every
// tensor encoding, metadata, status, each kind of bad request with the status code and message
// it must have, a truncated message, batching; after every bad request the server still
// answers correctly.
#include "serving/grpc_server.h"

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "kiln/nn.h"
#include "serving/proto/prediction_service.grpc.pb.h"
#include "tests/serving/two_versions.h"
#include "tests/testing/temp_dir.h"

namespace kiln::serving {
namespace {

namespace tfs = tensorflow::serving;
using ::testing::HasSubstr;

tensorflow::TensorProto floats(std::vector<float> values, std::vector<int64_t> shape) {
  tensorflow::TensorProto p;
  p.set_dtype(tensorflow::DT_FLOAT);
  for (int64_t d : shape) p.mutable_tensor_shape()->add_dim()->set_size(d);
  for (float v : values) p.add_float_val(v);
  return p;
}

std::vector<float> values_of(const tensorflow::TensorProto& p) {
  std::vector<float> out(p.tensor_content().size() / sizeof(float));
  std::memcpy(out.data(), p.tensor_content().data(), p.tensor_content().size());
  return out;
}

class GrpcTest : public testing_util::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    mm_ = testing_util::two_versions(path("m"));
  }

  tfs::PredictRequest request(std::vector<float> x = {1, 1, 1}, int64_t rows = 1) {
    tfs::PredictRequest req;
    req.mutable_model_spec()->set_name("m");
    const std::string input = mm_->get("m", std::nullopt)->model_handle.signatures()
                                  .at("serving_default").inputs.begin()->first;
    (*req.mutable_inputs())[input] = floats(std::move(x), {rows, 3});
    return req;
  }
  std::string input_name() { return request().inputs().begin()->first; }

  grpc::Status predict(const tfs::PredictRequest& req, tfs::PredictResponse* resp) {
    return grpc_predict(*mm_, req, resp);
  }
  void expect_still_serving() {
    tfs::PredictResponse resp;
    ASSERT_TRUE(predict(request(), &resp).ok());
    ASSERT_EQ(resp.outputs_size(), 1);
    EXPECT_EQ(values_of(resp.outputs().begin()->second), (std::vector<float>{6, 6}));
  }
  // The status of a request, after which the model still answers.
  grpc::Status bad(const tfs::PredictRequest& req) {
    tfs::PredictResponse resp;
    grpc::Status s = predict(req, &resp);
    expect_still_serving();
    return s;
  }

  std::unique_ptr<ModelManager> mm_;
};

TEST_F(GrpcTest, PredictTakesEveryEncodingAndNamesTheVersionItRan) {
  tfs::PredictResponse resp;
  ASSERT_TRUE(predict(request({1, 2, 3, 0, 0, 1}, 2), &resp).ok());
  const tensorflow::TensorProto& out = resp.outputs().begin()->second;
  EXPECT_EQ(out.dtype(), tensorflow::DT_FLOAT);
  ASSERT_EQ(out.tensor_shape().dim_size(), 2);
  EXPECT_EQ(out.tensor_shape().dim(0).size(), 2);
  EXPECT_EQ(out.tensor_shape().dim(1).size(), 2);
  EXPECT_EQ(values_of(out), (std::vector<float>{12, 12, 2, 2}));  // version 2: weights 2
  EXPECT_EQ(resp.model_spec().name(), "m");
  EXPECT_EQ(resp.model_spec().version().value(), 2);
  EXPECT_EQ(resp.model_spec().signature_name(), "serving_default");

  // tensor_content, as tf.make_tensor_proto writes it
  tfs::PredictRequest req = request();
  tensorflow::TensorProto& x = (*req.mutable_inputs())[input_name()];
  const std::vector<float> raw = {1, 2, 3};
  x.clear_float_val();
  x.set_tensor_content(raw.data(), raw.size() * sizeof(float));
  ASSERT_TRUE(predict(req, &resp).ok());
  EXPECT_EQ(values_of(resp.outputs().begin()->second), (std::vector<float>{12, 12}));

  // a list shorter than the shape repeats its last value
  x.clear_tensor_content();
  x.add_float_val(3);
  ASSERT_TRUE(predict(req, &resp).ok());
  EXPECT_EQ(values_of(resp.outputs().begin()->second), (std::vector<float>{18, 18}));

  // by version number and by label
  req = request();
  req.mutable_model_spec()->mutable_version()->set_value(1);
  ASSERT_TRUE(predict(req, &resp).ok());
  EXPECT_EQ(resp.model_spec().version().value(), 1);
  EXPECT_EQ(values_of(resp.outputs().begin()->second), (std::vector<float>{3, 3}));
  req = request();
  req.mutable_model_spec()->set_version_label("stable");
  ASSERT_TRUE(predict(req, &resp).ok());
  EXPECT_EQ(resp.model_spec().version().value(), 1);
}

TEST_F(GrpcTest, BadRequestsAreClearErrorsWithTheirStatusCodes) {
  tfs::PredictRequest req = request();
  req.mutable_model_spec()->set_name("nope");
  grpc::Status s = bad(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("nope"));

  req = request();
  req.mutable_model_spec()->clear_name();
  EXPECT_EQ(bad(req).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  req = request();
  req.mutable_model_spec()->mutable_version()->set_value(7);
  s = bad(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("Specific(m, 7)"));

  req = request();
  req.mutable_model_spec()->set_version_label("canary");
  EXPECT_EQ(bad(req).error_code(), grpc::StatusCode::NOT_FOUND);

  req = request();
  req.mutable_model_spec()->set_signature_name("classify");
  s = bad(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("serving_default"));

  // wrong dtype: the input, the given and the wanted dtype
  req = request();
  tensorflow::TensorProto& x = (*req.mutable_inputs())[input_name()];
  x.set_dtype(tensorflow::DT_INT64);
  x.clear_float_val();
  x.add_int64_val(1);
  s = bad(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("'" + input_name() + "' is DT_INT64[1,3]"));
  EXPECT_THAT(s.error_message(), HasSubstr("wants DT_FLOAT"));

  // wrong inner dimension and wrong rank
  req = request();
  (*req.mutable_inputs())[input_name()] = floats({1, 1, 1, 1}, {1, 4});
  s = bad(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("has shape [1,4]"));
  (*req.mutable_inputs())[input_name()] = floats({1, 1, 1}, {3});
  EXPECT_THAT(bad(req).error_message(), HasSubstr("has shape [3]"));

  // an unknown dimension, more values than elements, tensor_content of the wrong size
  (*req.mutable_inputs())[input_name()] = floats({1}, {-1, 3});
  EXPECT_THAT(bad(req).error_message(), HasSubstr("unknown dimension"));
  (*req.mutable_inputs())[input_name()] = floats({1, 2, 3, 4}, {1, 3});
  EXPECT_THAT(bad(req).error_message(), HasSubstr("4 values for 3 elements"));
  tensorflow::TensorProto short_content = floats({}, {1, 3});
  short_content.set_tensor_content(std::string(8, '\0'));
  (*req.mutable_inputs())[input_name()] = short_content;
  EXPECT_THAT(bad(req).error_message(), HasSubstr("8 bytes of tensor_content"));

  // missing and extra inputs
  req = request();
  req.mutable_inputs()->clear();
  s = bad(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("is missing"));
  req = request();
  (*req.mutable_inputs())["extra"] = floats({1}, {1});
  EXPECT_THAT(bad(req).error_message(), HasSubstr("'extra' is not one of the signature's inputs"));

  // an output filter naming no output; a dtype Kiln has no tensor for
  req = request();
  req.add_output_filter("logits");
  EXPECT_THAT(bad(req).error_message(), HasSubstr("output_filter: 'logits'"));
  req = request();
  (*req.mutable_inputs())[input_name()].set_dtype(tensorflow::DT_COMPLEX64);
  EXPECT_THAT(bad(req).error_message(), HasSubstr("DT_COMPLEX64 is not supported"));
}

TEST_F(GrpcTest, MetadataAndStatus) {
  tfs::GetModelMetadataRequest req;
  req.mutable_model_spec()->set_name("m");
  tfs::GetModelMetadataResponse resp;
  grpc::Status s = grpc_get_model_metadata(*mm_, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // no metadata_field
  req.add_metadata_field("signature_def");
  ASSERT_TRUE(grpc_get_model_metadata(*mm_, req, &resp).ok());
  EXPECT_EQ(resp.model_spec().version().value(), 2);
  tfs::SignatureDefMap map;
  ASSERT_TRUE(resp.metadata().at("signature_def").UnpackTo(&map));
  EXPECT_EQ(resp.metadata().at("signature_def").type_url(),
            "type.googleapis.com/tensorflow.serving.SignatureDefMap");
  const tensorflow::SignatureDef& def = map.signature_def().at("serving_default");
  EXPECT_EQ(def.method_name(), "tensorflow/serving/predict");
  const tensorflow::TensorInfo& in = def.inputs().at(input_name());
  EXPECT_EQ(in.dtype(), tensorflow::DT_FLOAT);
  ASSERT_EQ(in.tensor_shape().dim_size(), 2);
  EXPECT_EQ(in.tensor_shape().dim(0).size(), -1);
  EXPECT_EQ(in.tensor_shape().dim(1).size(), 3);

  tfs::GetModelStatusRequest sreq;
  sreq.mutable_model_spec()->set_name("m");
  tfs::GetModelStatusResponse sresp;
  ASSERT_TRUE(grpc_get_model_status(*mm_, sreq, &sresp).ok());
  ASSERT_EQ(sresp.model_version_status_size(), 2);
  EXPECT_EQ(sresp.model_version_status(0).version(), 2);
  EXPECT_EQ(sresp.model_version_status(0).state(), tfs::ModelVersionStatus::AVAILABLE);
  EXPECT_EQ(sresp.model_version_status(0).status().error_code(), 0);
  sreq.mutable_model_spec()->set_name("nope");
  sresp.Clear();
  EXPECT_EQ(grpc_get_model_status(*mm_, sreq, &sresp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcTest, ServerAnswersStubsAndSurvivesATruncatedMessage) {
  Metrics metrics;
  GrpcServer server(*mm_, {.host = "127.0.0.1", .port = 0, .max_message_bytes = 1 << 16},
                    nullptr, &metrics);
  server.start();
  ASSERT_GT(server.port(), 0);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = tfs::PredictionService::NewStub(channel);
  auto call = [&](const tfs::PredictRequest& req, tfs::PredictResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub->Predict(&ctx, req, resp);
  };
  tfs::PredictResponse resp;
  ASSERT_TRUE(call(request(), &resp).ok());
  EXPECT_EQ(values_of(resp.outputs().begin()->second), (std::vector<float>{6, 6}));

  // A truncated PredictRequest (cut inside the input tensor), sent as raw bytes.
  grpc::GenericStub generic(channel);
  // A call of `method` with `bytes` as the message, as a stub would send it: its status.
  auto raw_call = [&generic](const std::string& method, const std::string& bytes) {
    grpc::ClientContext ctx;
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer sent(&slice, 1), received;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(&ctx, method, {}, &sent, &received, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      status = s;
      done = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  };
  const std::string bytes = request().SerializeAsString();
  grpc::Status truncated =
      raw_call("/tensorflow.serving.PredictionService/Predict", bytes.substr(0, bytes.size() - 5));
  EXPECT_FALSE(truncated.ok());
  EXPECT_NE(truncated.error_code(), grpc::StatusCode::UNAVAILABLE);  // answered, not dropped
  ASSERT_TRUE(call(request(), &resp).ok());

  // A message over the size limit, and a model the server does not have.
  grpc::Status big = call(request(std::vector<float>(3 * 10000, 1.0f), 10000), &resp);
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  tfs::PredictRequest nope = request();
  nope.mutable_model_spec()->set_name("nope");
  EXPECT_EQ(call(nope, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(call(request(), &resp).ok());
  EXPECT_EQ(values_of(resp.outputs().begin()->second), (std::vector<float>{6, 6}));

  // ModelService and GetModelMetadata through their stubs; methods left out are UNIMPLEMENTED.
  auto model_stub = tfs::ModelService::NewStub(channel);
  tfs::GetModelStatusRequest sreq;
  sreq.mutable_model_spec()->set_name("m");
  tfs::GetModelStatusResponse sresp;
  grpc::ClientContext sctx;
  ASSERT_TRUE(model_stub->GetModelStatus(&sctx, sreq, &sresp).ok());
  EXPECT_EQ(sresp.model_version_status_size(), 2);
  EXPECT_EQ(raw_call("/tensorflow.serving.PredictionService/Classify", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);

  const std::string text = metrics.prometheus_text(*mm_, nullptr);
  EXPECT_THAT(text, HasSubstr(R"(api="grpc_predict",status="200"})"));
  EXPECT_THAT(text, HasSubstr(R"(api="grpc_predict",status="404"})"));
  server.stop();
}

TEST_F(GrpcTest, ConcurrentCallsAreBatchedAndSplitBack) {
  Batcher batcher({.max_batch_size = 8, .batch_timeout_micros = 200000});
  GrpcServer server(*mm_, {.host = "127.0.0.1", .port = 0}, &batcher);
  server.start();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = tfs::PredictionService::NewStub(channel);
  std::vector<std::thread> clients;
  std::vector<std::vector<float>> got(8);
  std::vector<bool> ok(8);
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      grpc::ClientContext ctx;
      tfs::PredictResponse resp;
      const float v = static_cast<float>(i);
      ok[i] = stub->Predict(&ctx, request({v, v, v}), &resp).ok();
      if (ok[i]) got[i] = values_of(resp.outputs().begin()->second);
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(ok[i]) << i;
    EXPECT_EQ(got[i], (std::vector<float>{6.0f * i, 6.0f * i})) << i;
  }
  EXPECT_LT(batcher.stats().batches, 8);  // at least two calls shared a run
  server.stop();
}

}  // namespace
}  // namespace kiln::serving

// A TF Serving gRPC client: asks kiln-serve (or TensorFlow Serving) for a model's signature,
// sends Fashion-MNIST test images to it in Predict calls, and prints the accuracy of the
// predictions and the calls' latency. Only the generated stub (serving/proto/
// prediction_service.grpc.pb.h) and grpc++ are used to talk to the server, as any TF Serving
// client would; Kiln itself only reads the dataset.
//
//   serving_client --server=localhost:8500 --model_name=fashion_mnist [--images=1000]
//                  [--batch_size=1] [--version=N | --version_label=L]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "kiln/data/fashion_mnist.h"
#include "serving/proto/prediction_service.grpc.pb.h"

namespace tfs = tensorflow::serving;

namespace {

[[noreturn]] void fail(const std::string& what, const grpc::Status& s) {
  std::fprintf(stderr, "serving_client: %s failed: %s (gRPC status %d)\n", what.c_str(),
               s.error_message().c_str(), static_cast<int>(s.error_code()));
  std::exit(1);
}

void fill_spec(tfs::ModelSpec* spec, const std::string& model, long long version,
               const std::string& label) {
  spec->set_name(model);
  if (version > 0) spec->mutable_version()->set_value(version);
  if (!label.empty()) spec->set_version_label(label);
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(argc, argv);
  const std::string server = flags.str("server", "localhost:8500");
  const std::string model = flags.str("model_name", "fashion_mnist");
  const long long images = flags.integer("images", 1000, 1, 10000);
  const long long batch = flags.integer("batch_size", 1, 1, 10000);
  const long long version = flags.integer("version", 0, 0, examples::kMaxInt64);
  const std::string label = flags.str("version_label", "");
  const std::string data_dir = flags.str("data_dir", kiln::data::default_fashion_mnist_dir());
  flags.check();

  auto channel = grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
  auto stub = tfs::PredictionService::NewStub(channel);

  // The signature: which input takes the image, and its shape.
  tfs::GetModelMetadataRequest meta_req;
  fill_spec(meta_req.mutable_model_spec(), model, version, label);
  meta_req.add_metadata_field("signature_def");
  tfs::GetModelMetadataResponse meta;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s = stub->GetModelMetadata(&ctx, meta_req, &meta);
    if (!s.ok()) fail("GetModelMetadata", s);
  }
  tfs::SignatureDefMap signatures;
  if (!meta.metadata().count("signature_def") ||
      !meta.metadata().at("signature_def").UnpackTo(&signatures) ||
      !signatures.signature_def().count("serving_default")) {
    std::fprintf(stderr, "serving_client: the model has no serving_default signature\n");
    return 1;
  }
  const tensorflow::SignatureDef& sig = signatures.signature_def().at("serving_default");
  if (sig.inputs_size() != 1 || sig.outputs_size() != 1) {
    std::fprintf(stderr, "serving_client: expected one input and one output, got %d and %d\n",
                 sig.inputs_size(), sig.outputs_size());
    return 1;
  }
  const auto& [input, info] = *sig.inputs().begin();
  std::vector<int64_t> inner;
  long long pixels = 1;
  std::string shape = "[batch";
  for (int i = 1; i < info.tensor_shape().dim_size(); ++i) {
    inner.push_back(info.tensor_shape().dim(i).size());
    pixels *= inner.back();
    shape += "," + std::to_string(inner.back());
  }
  shape += "]";
  if (info.dtype() != tensorflow::DT_FLOAT || pixels != 28 * 28) {
    std::fprintf(stderr, "serving_client: input '%s' is %s%s; Fashion-MNIST needs DT_FLOAT with 784 "
                 "values an image\n", input.c_str(), tensorflow::DataType_Name(info.dtype()).c_str(),
                 shape.c_str());
    return 1;
  }
  std::printf("model %s version %lld: input '%s' DT_FLOAT%s, output '%s'\n", model.c_str(),
              static_cast<long long>(meta.model_spec().version().value()), input.c_str(),
              shape.c_str(), sig.outputs().begin()->first.c_str());

  kiln::data::FashionMnist data = kiln::data::load_fashion_mnist(data_dir);
  auto pix = data.test_images.data<float>();
  auto labels = data.test_labels.data<int32_t>();

  long long correct = 0;
  std::vector<double> latency_us;
  for (long long start = 0; start < images; start += batch) {
    const long long n = std::min(batch, images - start);
    tfs::PredictRequest req;
    fill_spec(req.mutable_model_spec(), model, version, label);
    tensorflow::TensorProto& x = (*req.mutable_inputs())[input];
    x.set_dtype(tensorflow::DT_FLOAT);
    x.mutable_tensor_shape()->add_dim()->set_size(n);
    for (int64_t d : inner) x.mutable_tensor_shape()->add_dim()->set_size(d);
    x.set_tensor_content(pix.data() + start * pixels, n * pixels * sizeof(float));
    tfs::PredictResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    const auto t0 = std::chrono::steady_clock::now();
    grpc::Status s = stub->Predict(&ctx, req, &resp);
    latency_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!s.ok()) fail("Predict", s);
    const tensorflow::TensorProto& y = resp.outputs().begin()->second;
    const long long classes = y.tensor_shape().dim_size() == 2 ? y.tensor_shape().dim(1).size() : 0;
    if (y.dtype() != tensorflow::DT_FLOAT || classes <= 0 ||
        y.tensor_content().size() != static_cast<size_t>(n * classes) * sizeof(float)) {
      std::fprintf(stderr, "serving_client: the output is not DT_FLOAT [%lld, classes]\n", n);
      return 1;
    }
    std::vector<float> scores(static_cast<size_t>(n * classes));
    std::memcpy(scores.data(), y.tensor_content().data(), y.tensor_content().size());
    for (long long i = 0; i < n; ++i) {
      const float* row = scores.data() + i * classes;
      const long long guess = std::max_element(row, row + classes) - row;
      correct += guess == labels[start + i];
    }
  }
  std::sort(latency_us.begin(), latency_us.end());
  std::printf("accuracy %.4f over %lld test images; %zu Predict calls of %lld, latency p50 %.0f us "
              "p99 %.0f us\n",
              static_cast<double>(correct) / static_cast<double>(images), images,
              latency_us.size(), batch, latency_us[latency_us.size() / 2],
              latency_us[std::min(latency_us.size() - 1, latency_us.size() * 99 / 100)]);
  return 0;
}

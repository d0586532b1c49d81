// TF Serving's gRPC API (serving/grpc_server.h).
#include "serving/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "kiln/error.h"
#include "serving/predict_json.h"
#include "serving/proto/prediction_service.grpc.pb.h"
#include "serving/rest_api.h"
#include "serving/tensor_proto.h"

namespace kiln::serving {
namespace {

namespace tfs = tensorflow::serving;

grpc::StatusCode grpc_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case ErrorCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case ErrorCode::kAlreadyExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case ErrorCode::kFailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case ErrorCode::kOutOfRange:
      return grpc::StatusCode::OUT_OF_RANGE;
    case ErrorCode::kUnimplemented:
      return grpc::StatusCode::UNIMPLEMENTED;
    case ErrorCode::kDataLoss:
      return grpc::StatusCode::DATA_LOSS;
    case ErrorCode::kResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case ErrorCode::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case ErrorCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case ErrorCode::kInternal:
      break;
  }
  return grpc::StatusCode::INTERNAL;
}

// Runs `body`, turning a kiln::Error into its status.
template <class F>
grpc::Status guarded(F&& body) {
  try {
    body();
    return grpc::Status::OK;
  } catch (const Error& e) {
    return {grpc_code(e.code()), e.what()};
  } catch (const std::exception& e) {
    return {grpc::StatusCode::INTERNAL, e.what()};
  }
}

// The version a ModelSpec asks for: a number, a label, or neither (the newest).
std::shared_ptr<const Servable> servable_of(const ModelManager& models, const tfs::ModelSpec& spec) {
  if (spec.name().empty())
    throw Error(ErrorCode::kInvalidArgument, "model_spec.name is missing: name a model");
  std::optional<int64_t> version;
  if (spec.has_version()) version = spec.version().value();
  return models.get(spec.name(), version, spec.version_label());
}

void fill_spec(const Servable& s, const std::string& signature, tfs::ModelSpec* spec) {
  spec->set_name(s.model);
  spec->mutable_version()->set_value(s.version);
  spec->set_signature_name(signature);
}

void fill_infos(const std::map<std::string, TensorType>& m,
                google::protobuf::Map<std::string, tensorflow::TensorInfo>* out) {
  for (const auto& [name, type] : m) {
    tensorflow::TensorInfo& info = (*out)[name];
    info.set_name(name);
    info.set_dtype(to_tf_dtype(type.dtype));
    for (int64_t d : type.shape) info.mutable_tensor_shape()->add_dim()->set_size(d);
  }
}

int http_equivalent(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

}  // namespace

grpc::Status grpc_predict(const ModelManager& models, const tfs::PredictRequest& req,
                          tfs::PredictResponse* resp, Batcher* batcher) {
  return guarded([&] {
    std::shared_ptr<const Servable> s = servable_of(models, req.model_spec());
    const std::string signature =
        req.model_spec().signature_name().empty() ? "serving_default"
                                                  : req.model_spec().signature_name();
    const io::SignatureInfo& sig = find_signature(s->model_handle.signatures(), signature);
    std::vector<std::string> given;
    for (const auto& [name, proto] : req.inputs()) given.push_back(name);
    check_input_names(given, sig.inputs, "");
    std::map<std::string, Tensor> inputs;
    int64_t rows = -1;
    std::string first;
    for (const auto& [name, type] : sig.inputs) {
      Tensor t = tensor_from_proto(req.inputs().at(name), name);
      if (t.dtype() != type.dtype) {
        throw Error(ErrorCode::kInvalidArgument,
                    "input '" + name + "' is " + tf_dtype_name(t.dtype()) + shape_str(t.shape()) +
                        ", but the signature wants " + tf_dtype_name(type.dtype) +
                        shape_str(type.shape));
      }
      check_input_shape(name, t, type);
      if (t.rank() > 0) {
        if (rows >= 0 && t.dim(0) != rows) {
          throw Error(ErrorCode::kInvalidArgument,
                      "inputs '" + first + "' and '" + name + "' have " + std::to_string(rows) +
                          " and " + std::to_string(t.dim(0)) +
                          " rows: every input must have the same batch dimension");
        }
        if (rows < 0) rows = t.dim(0), first = name;
      }
      inputs.emplace(name, std::move(t));
    }
    for (const std::string& f : req.output_filter()) {
      if (!sig.outputs.count(f)) {
        std::string known;
        for (const auto& [k, v] : sig.outputs) known += (known.empty() ? "'" : ", '") + k + "'";
        throw Error(ErrorCode::kInvalidArgument, "output_filter: '" + f +
                                                     "' is not one of the signature's outputs (" +
                                                     known + ")");
      }
    }
    std::map<std::string, Tensor> out = batcher ? batcher->run(s, signature, std::move(inputs))
                                                : s->model_handle.run(signature, inputs);
    for (const auto& [name, t] : out) {
      const auto& filter = req.output_filter();
      if (!filter.empty() && std::find(filter.begin(), filter.end(), name) == filter.end())
        continue;
      tensor_to_proto(t, name, &(*resp->mutable_outputs())[name]);
    }
    fill_spec(*s, signature, resp->mutable_model_spec());
  });
}

grpc::Status grpc_get_model_metadata(const ModelManager& models,
                                     const tfs::GetModelMetadataRequest& req,
                                     tfs::GetModelMetadataResponse* resp) {
  return guarded([&] {
    if (req.metadata_field_size() == 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "GetModelMetadataRequest.metadata_field is empty: ask for \"signature_def\"");
    for (const std::string& f : req.metadata_field()) {
      if (f != "signature_def")
        throw Error(ErrorCode::kInvalidArgument,
                    "metadata_field '" + f + "' is not supported: \"signature_def\" is");
    }
    std::shared_ptr<const Servable> s = servable_of(models, req.model_spec());
    tfs::SignatureDefMap map;
    for (const auto& [name, sig] : s->model_handle.signatures()) {
      tensorflow::SignatureDef& def = (*map.mutable_signature_def())[name];
      fill_infos(sig.inputs, def.mutable_inputs());
      fill_infos(sig.outputs, def.mutable_outputs());
      def.set_method_name("tensorflow/serving/predict");
    }
    (*resp->mutable_metadata())["signature_def"].PackFrom(map);
    fill_spec(*s, "", resp->mutable_model_spec());
  });
}

grpc::Status grpc_get_model_status(const ModelManager& models,
                                   const tfs::GetModelStatusRequest& req,
                                   tfs::GetModelStatusResponse* resp) {
  return guarded([&] {
    const tfs::ModelSpec& spec = req.model_spec();
    if (spec.name().empty())
      throw Error(ErrorCode::kInvalidArgument, "model_spec.name is missing: name a model");
    std::optional<int64_t> version;
    if (spec.has_version()) version = spec.version().value();
    for (const VersionStatus& v : models.status(spec.name(), version, spec.version_label())) {
      tfs::ModelVersionStatus* out = resp->add_model_version_status();
      out->set_version(v.version);
      switch (v.state) {
        case VersionState::kStart:
          out->set_state(tfs::ModelVersionStatus::START);
          break;
        case VersionState::kLoading:
          out->set_state(tfs::ModelVersionStatus::LOADING);
          break;
        case VersionState::kAvailable:
          out->set_state(tfs::ModelVersionStatus::AVAILABLE);
          break;
        case VersionState::kUnloading:
          out->set_state(tfs::ModelVersionStatus::UNLOADING);
          break;
        case VersionState::kEnd:
          out->set_state(tfs::ModelVersionStatus::END);
          break;
      }
      // tensorflow.error.Code: OK = 0, UNKNOWN = 2.
      out->mutable_status()->set_error_code(v.error.empty() ? 0 : 2);
      out->mutable_status()->set_error_message(v.error);
    }
  });
}

namespace {

// Both services over one manager, each call counted in the metrics.
class Services final : public tfs::PredictionService::Service, public tfs::ModelService::Service {
 public:
  Services(const ModelManager& models, Batcher* batcher, Metrics* metrics)
      : models_(models), batcher_(batcher), metrics_(metrics) {}

  grpc::Status Predict(grpc::ServerContext*, const tfs::PredictRequest* req,
                       tfs::PredictResponse* resp) override {
    return timed(req->model_spec(), "grpc_predict",
                 [&] { return grpc_predict(models_, *req, resp, batcher_); }, resp);
  }
  grpc::Status GetModelMetadata(grpc::ServerContext*, const tfs::GetModelMetadataRequest* req,
                                tfs::GetModelMetadataResponse* resp) override {
    return timed(req->model_spec(), "grpc_metadata",
                 [&] { return grpc_get_model_metadata(models_, *req, resp); }, resp);
  }
  grpc::Status GetModelStatus(grpc::ServerContext*, const tfs::GetModelStatusRequest* req,
                              tfs::GetModelStatusResponse* resp) override {
    return timed(req->model_spec(), "grpc_status",
                 [&] { return grpc_get_model_status(models_, *req, resp); },
                 static_cast<tfs::PredictResponse*>(nullptr));
  }

 private:
  template <class F, class Resp>
  grpc::Status timed(const tfs::ModelSpec& spec, const char* api, F&& call, Resp* resp) {
    const auto start = std::chrono::steady_clock::now();
    grpc::Status s = call();
    if (metrics_) {
      std::string version;
      if (resp && resp->has_model_spec() && resp->model_spec().has_version())
        version = std::to_string(resp->model_spec().version().value());
      metrics_->record(
          spec.name(), version, api, http_equivalent(s),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return s;
  }

  const ModelManager& models_;
  Batcher* batcher_;
  Metrics* metrics_;
};

}  // namespace

struct GrpcServer::Impl {
  const ModelManager& models;
  GrpcOptions options;
  Services services;
  std::unique_ptr<grpc::Server> server;
  Impl(const ModelManager& m, GrpcOptions o, Batcher* b, Metrics* me)
      : models(m), options(std::move(o)), services(m, b, me) {}
};

GrpcServer::GrpcServer(const ModelManager& models, GrpcOptions options, Batcher* batcher,
                       Metrics* metrics)
    : impl_(std::make_unique<Impl>(models, std::move(options), batcher, metrics)) {}

GrpcServer::~GrpcServer() { stop(0); }

void GrpcServer::start() {
  Impl& s = *impl_;
  grpc::ServerBuilder builder;
  // An IPv6 address goes in brackets ("[::]:8500").
  const bool v6 = s.options.host.find(':') != std::string::npos && s.options.host[0] != '[';
  const std::string address = (v6 ? "[" + s.options.host + "]" : s.options.host) + ":" +
                              std::to_string(s.options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(s.options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(s.options.max_message_bytes));
  grpc::ResourceQuota quota("kiln-serve");
  quota.SetMaxThreads(std::max(2, s.options.max_threads));
  builder.SetResourceQuota(quota);
  // gRPC's sync server ends a thread that finds more than MAX_POLLERS threads idle, and starts
  // one when fewer than MIN_POLLERS poll. Requests that wait in the batcher come and go in
  // bursts of a batch: with the default (2) it would end and start threads every batch.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              std::max(2, s.options.max_threads));
  builder.RegisterService(static_cast<tfs::PredictionService::Service*>(&s.services));
  builder.RegisterService(static_cast<tfs::ModelService::Service*>(&s.services));
  s.server = builder.BuildAndStart();
  if (!s.server || port_ <= 0) {
    s.server.reset();
    throw Error(ErrorCode::kUnavailable, "kiln-serve: cannot serve gRPC on " + address);
  }
}

void GrpcServer::stop(double grace_seconds) {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::microseconds(static_cast<int64_t>(grace_seconds * 1e6)));
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace kiln::serving

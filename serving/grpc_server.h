// TF Serving's gRPC API over a ModelManager: tensorflow.serving.PredictionService (Predict,
// GetModelMetadata) and tensorflow.serving.ModelService (GetModelStatus), on Debian's grpc++
// (its synchronous server: a pool of threads, as many as `max_threads`). The messages are
// serving/proto/*.proto, the same on the wire as TF Serving's, so a stub generated from TF
// Serving's own .proto files calls it unchanged. Errors carry the status code of the kiln::Error
// behind them (INVALID_ARGUMENT naming the input and the expected vs given dtype or shape,
// NOT_FOUND for an unknown model, version, label or signature, UNAVAILABLE when the batching
// queue is full).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <grpcpp/support/status.h>

#include "serving/batcher.h"
#include "serving/metrics.h"
#include "serving/model_manager.h"
#include "serving/proto/prediction_service.pb.h"

namespace kiln::serving {

struct GrpcOptions {
  std::string host = "0.0.0.0";
  int port = 8500;  // 0: any free port (see port())
  size_t max_message_bytes = 64 << 20;
  int max_threads = 16;
};

// The services' logic as functions of the request (tested without a network), each returning
// the status and filling the response.
grpc::Status grpc_predict(const ModelManager& models, const tensorflow::serving::PredictRequest& req,
                          tensorflow::serving::PredictResponse* resp, Batcher* batcher = nullptr);
grpc::Status grpc_get_model_metadata(const ModelManager& models,
                                     const tensorflow::serving::GetModelMetadataRequest& req,
                                     tensorflow::serving::GetModelMetadataResponse* resp);
grpc::Status grpc_get_model_status(const ModelManager& models,
                                   const tensorflow::serving::GetModelStatusRequest& req,
                                   tensorflow::serving::GetModelStatusResponse* resp);

class GrpcServer {
 public:
  GrpcServer(const ModelManager& models, GrpcOptions options, Batcher* batcher = nullptr,
             Metrics* metrics = nullptr);
  ~GrpcServer();  // stop()
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Binds and starts serving on gRPC's threads; throws kiln::Error (kUnavailable) naming host
  // and port when it cannot.
  void start();
  int port() const { return port_; }
  // Stops accepting and waits for the calls in flight (cancelling them after `grace_seconds`).
  void stop(double grace_seconds = 30);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kiln::serving

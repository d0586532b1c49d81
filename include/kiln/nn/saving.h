// Whole-model save and load, as Keras' model.save() and keras.models.load_model(): one file
// holds the architecture (each layer's class and config, and how layers are called), the
// weights, the optimizer's state (slots, iteration count, learning-rate schedule) and the
// compile configuration (optimizer, losses, metrics, loss weights). load_model gives back a
// Model that can fit further (continuing exactly where the saved one stopped: the same
// weights, optimizer state and, with the same FitOptions and initial_epoch, the same batches
// and dropout seeds), evaluate, predict and summary.
//
// Two formats, side by side:
//   Model::save / nn::load_model   the whole model, to train further or serve (this file)
//   io::save_model / io::load_model  an exported inference graph (kiln/io/saved_model.h): runs
//                                    without the model's code, layer classes or Kiln's nn
//
// Custom layers, losses and optimizers round-trip through their registration
// (KILN_REGISTER_LAYER, nn::register_loss, optim::register_optimizer): save refuses a model
// with a class the registry cannot rebuild (kFailedPrecondition naming it), and load refuses a
// file naming a class this program has not registered (kNotFound naming it). A Lambda layer
// saves its function by name (nn::register_lambda_function).
//
// The file is written to a temporary file and renamed into place: a reader sees the previous
// file or the complete new one, never a half-written one. Every record is CRC-checked; a
// corrupt or truncated file, or bytes after the model's last record, is kDataLoss naming the
// file and what is wrong. A file of another kind (a checkpoint's index or data file, an
// exported model, a TensorBoard event file, other TFRecords) is kInvalidArgument naming what it
// is and how to read it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/nn/model.h"

namespace kiln::nn {

void save_model(const Model& model, const std::string& path);

struct LoadOptions {
  bool compile = true;  // false: the model comes back uncompiled (no optimizer state)
  LoadOptions& set_compile(bool v) { return compile = v, *this; }
};
// A Sequential model comes back as a Sequential.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options = {});

// What a whole-model file holds, as kiln-inspect prints it (Keras' model.summary() plus the
// compile configuration). Read by loading the model, so every class the file names must be
// registered in this program; the errors are load_model's.
struct ModelFileInfo {
  std::string path, model_name, kiln_version;
  bool functional = false;
  int64_t tensor_records = 0;  // weights, optimizer slots and state
  struct Layer {
    std::string name, class_name, dtype_policy;
    std::optional<TensorType> output;  // of its last call; none before the model is built
    int64_t params = 0;
  };
  std::vector<Layer> layers;  // each once, in the model's order
  // By name, the batch dimension unknown; empty for a Sequential model saved before build.
  std::vector<std::pair<std::string, TensorType>> inputs, outputs;
  int64_t params = 0, trainable_params = 0;
  std::string optimizer;  // empty: saved uncompiled
  Attrs optimizer_config;
  int64_t iterations = 0;
  std::vector<std::pair<std::string, Attrs>> losses;  // one per output (or one for all)
  std::vector<std::string> metrics;  // for every output, or by output as "<output>/<metric>"
  std::vector<double> loss_weights;
};
ModelFileInfo describe_model_file(const std::string& path);

}  // namespace kiln::nn

namespace kiln::io {

// Exports `model`'s inference graph (training=false) with io::save_graph (kiln/io/saved_model.h):
// for inputs of `input_shape` (without the batch dimension, which stays unknown), signature
// input "x" and output "output_0"; the second form uses the input types the model is built for
// and names every input and output (one: "x" and "output_0"; several: the model's names).
std::string save_model(nn::Model& model, const std::string& dir, const Shape& input_shape,
                       DType dtype = f32);
std::string save_model(nn::Model& model, const std::string& dir);

}  // namespace kiln::io

// ONNX import: a .onnx model (an ONNX ModelProto) becomes an ordinary Kiln graph, which compiles
// and fuses like any other, runs eagerly or interpreted, differentiates, and saves with
// io::save_graph. Each ONNX op maps to Kiln's primitives through one table (interop/onnx_op_table.cc).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/execution_mode.h"
#include "kiln/io/saved_model.h"
#include "kiln/tensor.h"

namespace kiln::onnx {

struct ImportOptions {
  // Initializers (the model's weights) become constants, which the compiler folds into the
  // code, or with this set, trainable variables (io::ExportedGraph::variables) to fine-tune.
  bool initializers_as_variables = false;
  // Shapes of graph inputs by name, replacing the model's: a symbolic dimension ("batch")
  // becomes kUnknownDim unless given here. Ops whose output shape depends on an unknown
  // dimension (a Reshape to a shape computed by Shape) need it given.
  std::map<std::string, Shape> input_shapes;
  // Graph inputs whose values are fixed at import, by name, like jax.jit's static arguments:
  // they become constants, so ops that need their values while importing (the shape of a
  // Reshape, the starts of a Slice) can read them. They are no longer inputs of the model.
  std::map<std::string, Tensor> static_inputs;
  // Where tensors stored as external data are read from; by default the model file's directory.
  std::string external_data_dir;
};

// An imported model: its graph with the graph inputs as placeholders, in the model's order, and
// its outputs. Copies share the graph and its compiled programs.
class Model {
 public:
  const io::ExportedGraph& graph() const;
  // The graph inputs and outputs in the model's order (graph().inputs and outputs by name).
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  // The default domain's opset and the producer, as the file says.
  int64_t opset() const;
  const std::string& producer() const;

  // Runs the model: one tensor per graph input, in order (or by name); returns the outputs in
  // order (or by name). Compiled on the first run with these input shapes, then from a cache;
  // variables (ImportOptions::initializers_as_variables) are read at every run. Throws
  // kiln::Error for a missing input or one whose dtype or shape is not the model's.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  std::vector<Tensor> run(std::initializer_list<Tensor> inputs) const {  // run({x, w})
    return run(std::vector<Tensor>(inputs));
  }
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs) const;

  // Compiled or interpreted: default_execution_mode() unless set for this handle.
  void set_execution_mode(ExecutionMode mode) { mode_ = mode; }
  ExecutionMode execution_mode() const;

  struct Impl;
  explicit Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
  std::optional<ExecutionMode> mode_;
};

// Reads and imports a .onnx file. Errors throw kiln::Error: kNotFound for a missing file,
// kDataLoss for one that is not a valid ModelProto (or external data that is missing or short),
// kUnimplemented listing every node Kiln cannot import (its name, op, domain, opset and why),
// all at once, and kInvalidArgument for a model that is not well formed (a value used before it
// is produced, a wrong input count, shapes that do not fit).
Model import_model(const std::string& path, const ImportOptions& options = {});
// The same from a serialized ModelProto in memory (`name` appears in messages).
Model import_model_from_string(const std::string& bytes, const ImportOptions& options = {},
                               const std::string& name = "<memory>");

// A serialized ONNX TensorProto (a test data set's input_0.pb) as a tensor.
Tensor read_tensor_proto(const std::string& path);

// ---- export -------------------------------------------------------------------------------
// A Kiln inference graph (an io::ExportedGraph: nn::Model::inference_graph, a traced function, an
// imported model) as an ONNX model of the default domain. Each Kiln op becomes ONNX nodes through
// one table (interop/onnx_export.cc); variables become initializers holding their current
// values, as do constants. Kiln is channels-last: a convolution or windowed reduction exports
// as transposes to NCHW around ONNX's Conv or pool.

struct ExportOptions {
  // The default domain's opset, 13 to 17 (what the ONNX 1.12 checker knows).
  int64_t opset = 17;
  // The model's producer_version; Kiln's version when empty (producer_name is "kiln").
  std::string producer_version;
  // Names for the dimensions of inputs and outputs, by signature name and axis: ONNX's
  // dim_param, so that runtimes know which sizes vary together. "" leaves an axis as the graph
  // has it. By default an input's unknown first dimension is "batch", its other unknown ones
  // "<input>_<axis>", and outputs' unknown dimensions are left unnamed.
  std::map<std::string, std::vector<std::string>> dim_names;
};

// Writes `graph` (the nodes its outputs need) to `path` as an ONNX ModelProto. The file is
// written beside `path` under a temporary name and renamed into place, so a failed export leaves
// no file, or the old one. Errors throw kiln::Error: kUnimplemented listing every node (its name
// and op, with why) that has no ONNX form, all at once; kInvalidArgument for an opset out of
// range or a graph that needs a placeholder that is neither an input nor a variable; kNotFound
// for a directory that does not exist and kFailedPrecondition for a file that cannot be written
// or renamed into place.
void export_model(const io::ExportedGraph& graph, const std::string& path,
                  const ExportOptions& options = {});
// The same as a serialized ModelProto in memory.
std::string export_model_to_string(const io::ExportedGraph& graph,
                                   const ExportOptions& options = {});

}  // namespace kiln::onnx

// Exported models: a model's inference graph, its signatures and its variables' values in a
// versioned directory, loadable (and servable) by a program that has none of the model's code.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/function.h"
#include "kiln/graph.h"
#include "kiln/tensor.h"
#include "kiln/variable.h"

namespace kiln::io {

// What an exported model holds: a graph, the inputs and outputs of its signature
// "serving_default" by name, and the variables with the placeholder each feeds. A model gives
// one with nn::Model::inference_graph; io::save_model(nn::Model&, ...) (kiln/nn/saving.h)
// exports a model in one call.
struct ExportedGraph {
  std::string model_name;
  Graph graph;
  std::vector<std::pair<std::string, Tensor>> inputs, outputs;
  std::vector<std::pair<Variable, Tensor>> variables;
};

// Writes `graph` to <dir>/<version>/, version = 1 + the highest numeric version already there
// (TF Serving's layout). Returns that directory. It holds
//   saved_model.pb        a SavedModel protobuf, as the one record of a TFRecord file (so it is
//                         CRC-checked): the nodes the outputs need, in order, each with its op,
//                         inputs, attributes (every AttrValue kind, tensors included) and
//                         output types; the signature "serving_default" (its inputs and outputs
//                         by name); and which placeholder each variable feeds
//   variables/variables   a checkpoint (see checkpoint.h) of the variables' values
// It is written in a temporary directory inside <dir> and renamed into place, so a reader sees
// a complete version or none.
std::string save_graph(const ExportedGraph& graph, const std::string& dir);

struct SignatureInfo {
  std::map<std::string, TensorType> inputs, outputs;
};

// What saved_model.pb says, without building the graph (no op needs to be registered).
struct SavedModelInfo {
  std::string path;  // <dir>/<version>
  int64_t version = 0;
  std::string model_name, kiln_version;
  std::map<std::string, SignatureInfo> signatures;
  int64_t num_nodes = 0;
  std::map<std::string, int64_t> op_counts;  // op -> nodes
  struct Variable {
    std::string name;
    DType dtype = f32;
    Shape shape;
  };
  std::vector<Variable> variables;
  int64_t num_parameters = 0;  // elements of all variables
};

// A model loaded by load_model: its graph rebuilt by calling each node's op (kiln::call_op),
// so any registered op works, custom ones of the loading program included; variables are
// placeholders of that graph, fed their loaded values at every run (as the model fed them).
// Runs are compiled, like the model's own: the same program, so the same bits as the saved
// model's compiled predict. Copies share the graph and its compiled programs.
class LoadedModel {
 public:
  // Runs the "serving_default" signature: its one input -> its one output.
  Tensor predict(const Tensor& x) const;
  // Runs a signature: every input by name -> every output by name. Compiled on the first run
  // with these input dtypes and shapes, then from a cache of the last 8; several threads may
  // run at once. Throws kiln::Error for a missing or extra input, or one whose dtype or shape
  // is not the signature's.
  std::map<std::string, Tensor> run(const std::string& signature,
                                    const std::map<std::string, Tensor>& inputs) const;

  // Compiled or interpreted: default_execution_mode() (so KILN_INTERPRET=1 interprets) unless
  // set for this handle (copies made after keep it).
  void set_execution_mode(ExecutionMode mode) { mode_ = mode; }
  ExecutionMode execution_mode() const;
  struct CompileStats {
    int64_t compiles = 0;    // runs that compiled (a new signature or input shapes)
    int64_t cache_hits = 0;  // compiled runs that reused a compiled program
  };
  CompileStats compile_stats() const;

  // A signature as an ExportedGraph (its inputs and outputs by name, in name order; every
  // variable a Variable holding its loaded value), to build on: nn::GraphLayer uses it as a
  // layer of a new model, save_graph writes it again. kNotFound for an unknown signature.
  ExportedGraph exported(const std::string& signature = "serving_default") const;

  const SavedModelInfo& info() const;
  const std::map<std::string, SignatureInfo>& signatures() const { return info().signatures; }
  const Graph& graph() const;

  struct Impl;
  explicit LoadedModel(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
  std::optional<ExecutionMode> mode_;
};

// Loads <dir>/<version> (version 0: the highest numeric version in `dir`; `dir` may also be a
// version directory itself). Every file is checked: errors throw kiln::Error — kNotFound for a
// missing model, kDataLoss for a corrupt one (naming the file and node), and the op registry's
// errors for an op this program does not register — never a crash.
LoadedModel load_model(const std::string& dir, int64_t version = 0);
// Reads and checks saved_model.pb and the variables' index only.
SavedModelInfo describe_saved_model(const std::string& dir, int64_t version = 0);

}  // namespace kiln::io

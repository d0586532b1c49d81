// GraphLayer: a whole exported graph (a trained model's inference graph: an imported ONNX model,
// a Kiln saved model, a Model's inference_graph()) used as one layer of a new model, like TF
// Hub's hub.KerasLayer. Its weights become the layer's weights, frozen or trainable, so a trained
// feature extractor gets a new head and is fine-tuned with fit:
//
//   auto base = std::make_shared<GraphLayer>(io::load_model("extractor").exported());
//   Sequential model({base, Dense(5)});            // frozen: only the head trains
//   // GraphLayer(graph, /*trainable=*/true) fine-tunes the extractor too
//
// kiln::hub::layer (kiln/hub.h) makes one from a handle: an .onnx file or a saved model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/io/saved_model.h"
#include "kiln/nn/layer.h"

namespace kiln::nn {

class GraphLayer : public Layer {
 public:
  // The layer takes graph.inputs in order (their shapes may leave the batch dimension unknown)
  // and gives graph.outputs (operator() the first; outputs() all). Its weights start from the
  // current values of graph.variables, trainable or not as `trainable` says. Computes in f32
  // whatever the global policy (the graph's dtypes are fixed). kInvalidArgument when the graph
  // has no inputs or outputs, or a placeholder that is neither an input nor a variable's.
  explicit GraphLayer(io::ExportedGraph graph, bool trainable = false,
                      std::string name = "graph_layer");
  std::string type_name() const override { return "GraphLayer"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<GraphLayer>(*this); }
  // The graph itself (a sub-graph attribute: its nodes, constants and the placeholders the
  // weights feed), the number of inputs, and whether the weights train: a saved model stores
  // the layer whole, so loading it needs nothing but Kiln.
  Attrs config() const override;
  static LayerPtr from_config(const Attrs& config);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, CallContext& ctx) override;

  bool trainable() const { return trainable_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<std::string>& output_names() const { return output_names_; }

 private:
  GraphLayer(std::shared_ptr<const SubGraph> sub, int64_t num_inputs, bool trainable,
             std::vector<Tensor> initial_values, std::vector<std::string> input_names,
             std::vector<std::string> output_names);
  void check() const;

  // params: the inputs' placeholders, then the variables'; results: the outputs.
  std::shared_ptr<const SubGraph> sub_;
  int64_t num_inputs_ = 0;
  bool trainable_ = false;
  std::vector<Tensor> initial_values_;  // one per variable placeholder
  std::vector<std::string> input_names_, output_names_, weight_names_;
  std::vector<Variable> variables_;     // set by build()
};

}  // namespace kiln::nn

// Functional model definitions: layer calls recorded on symbolic tensors that descend from
// nn::Input, replayed by Model when it traces a step.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/nn/layer.h"

namespace kiln::nn::detail {

struct FunctionalCall {
  LayerPtr layer;
  std::vector<Tensor> inputs;  // values of functional_graph()
  std::vector<Tensor> outputs;  // one, or several (Layer::outputs)
};

// The graph every nn::Input lives in (one per thread), and the layer calls recorded on it.
Graph& functional_graph();
std::vector<FunctionalCall>& functional_calls();
// The name each nn::Input was given (its placeholder's node name may carry a suffix that keeps
// it unique in functional_graph()), by node id.
std::map<int, std::string>& input_names();

}  // namespace kiln::nn::detail

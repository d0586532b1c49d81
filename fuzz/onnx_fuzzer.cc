// Fuzzes onnx::import_model_from_string and the imported model's run. Input: a serialized ONNX
// ModelProto. Checks: a model or a kiln::Error, never a crash; the error codes the import may
// give here are kDataLoss (the proto does not parse, initializer data that does not fill its
// dims, external data: nothing is ever there), kUnimplemented (ops, attributes, dtypes or
// domains Kiln does not import) and kInvalidArgument (a model that is not well formed: dangling
// names, inputs without shapes, shapes that do not chain, an op refusing its attributes), plus
// kOutOfRange from an op computed while importing (a Gather of constants out of range).
// A model that imports and is small enough is run interpreted on inputs of its declared shapes
// (unknown dimensions 2): it gives outputs of the model's declared dtypes, or kInvalidArgument,
// kOutOfRange, or kNotFound (no CPU kernel for a dtype).
#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "fuzz/fuzz_file.h"
#include "fuzz/fuzz_graph.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/onnx.h"

namespace {

using namespace kiln;

constexpr uint64_t kMaxElements = uint64_t{1} << 22;
constexpr int64_t kFedDim = 2;

uint64_t elements(const Shape& shape) {
  return fuzz::capped_elements(shape, kFedDim, kMaxElements);
}

// Whether every value of the graph stays small with unknown dimensions fed as kFedDim.
bool small_enough(const Graph& g) {
  uint64_t total = 0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    for (const TensorType& t : g.node(id).outputs) {
      const uint64_t n = elements(t.shape);
      if (n > kMaxElements) return false;
      total += n;
    }
  }
  return total <= 4 * kMaxElements;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  onnx::ImportOptions options;
  options.external_data_dir = "/nonexistent/kiln_fuzz_onnx";  // never read a real file
  std::optional<onnx::Model> model;
  try {
    model = onnx::import_model_from_string(bytes, options, "fuzz.onnx");
  } catch (const Error& e) {
    fuzz::note(e);
    fuzz::check(fuzz::one_of(e.code(), {ErrorCode::kDataLoss, ErrorCode::kUnimplemented,
                                  ErrorCode::kInvalidArgument, ErrorCode::kOutOfRange}));
    return 0;
  }
  const io::ExportedGraph& g = model->graph();
  fuzz::check(model->input_names().size() == g.inputs.size());
  if (!small_enough(g.graph)) return 0;
  std::vector<Tensor> inputs;
  for (const auto& [name, placeholder] : g.inputs) {
    Shape shape = placeholder.shape();
    std::replace(shape.begin(), shape.end(), kUnknownDim, kFedDim);
    Tensor t = Tensor::empty(placeholder.dtype(), shape);
    if (t.nbytes() > 0) std::fill_n(static_cast<char*>(t.raw_mutable_data()), t.nbytes(), 0);
    inputs.push_back(t);
  }
  model->set_execution_mode(ExecutionMode::kInterpreted);
  try {
    const std::vector<Tensor> outputs = model->run(inputs);
    fuzz::check(outputs.size() == g.outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      fuzz::check(outputs[i].defined() && !outputs[i].is_symbolic() &&
                  outputs[i].dtype() == g.outputs[i].second.dtype());
    }
  } catch (const Error& e) {
    fuzz::note(e);
    fuzz::check(fuzz::one_of(e.code(), {ErrorCode::kInvalidArgument, ErrorCode::kOutOfRange,
                                  ErrorCode::kNotFound}));
  }
  return 0;
}

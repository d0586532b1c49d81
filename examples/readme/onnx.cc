// README example: an ONNX model (one of ONNX's own test models, from Debian's libonnx-testdata)
// imported as a Kiln graph, run compiled, and checked against the outputs ONNX gives.
#include <iostream>
#include <string>

#include "kiln/kiln.h"
#include "kiln/onnx.h"

int main() {
  const std::string dir =
      "/usr/share/libonnx-testdata/data/node/test_conv_with_strides_padding/";
  kiln::onnx::Model model = kiln::onnx::import_model(dir + "model.onnx");
  std::cout << "opset " << model.opset() << ", inputs:";
  for (const std::string& name : model.input_names()) std::cout << " " << name;  // x W
  std::cout << "\n" << model.graph().graph.to_text();  // NCHW to NHWC, conv, and back

  kiln::Tensor x = kiln::onnx::read_tensor_proto(dir + "test_data_set_0/input_0.pb");
  kiln::Tensor w = kiln::onnx::read_tensor_proto(dir + "test_data_set_0/input_1.pb");
  kiln::Tensor want = kiln::onnx::read_tensor_proto(dir + "test_data_set_0/output_0.pb");
  kiln::Tensor y = model.run({x, w})[0];  // compiled on the first run, then cached
  const bool same = kiln::all(kiln::abs(y - want) <= kiln::Tensor::scalar(1e-4f)).item<bool>();
  std::cout << y << "\n" << (same ? "matches ONNX" : "DIFFERS from ONNX") << "\n";
  return same ? 0 : 1;
}

// ModelBuilder: assembles a lite model file (lite/format.h) from tensors and ops. The converter
// (kiln/lite_convert.h) uses it; so do the runtime's tests, which build models by hand.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/lite.h"
#include "lite/format.h"
#include "lite/kernels.h"

namespace kiln::lite {

// Writes `bytes` to `path` through a temporary file renamed over it: a failed write leaves any
// earlier file in place. kiln::Error naming the path when it cannot.
void write_file(const std::string& path, const std::string& bytes);

class ModelBuilder {
 public:
  using Params = std::array<int32_t, format::kNumParams>;
  // An activation (its shape's first dimension -1 for the batch); returns its index.
  int add_tensor(TensorInfo info);
  // A constant holding `bytes` bytes of data (copied).
  int add_constant(TensorInfo info, const void* data, size_t bytes);
  void add_op(format::OpCode code, std::string name, std::vector<int> inputs, int output,
              kernels::Activation activation = kernels::Activation::kNone, Params params = {});
  void set_input(int tensor) { input_ = tensor; }
  void set_output(int tensor) { output_ = tensor; }
  const TensorInfo& tensor(int index) const { return tensors_.at(index).info; }

  // The file's bytes.
  std::string serialize() const;
  // Writes them to `path` (write_file).
  void write(const std::string& path) const { write_file(path, serialize()); }

  // A window's params (kh, kw, strides, pads) and back.
  static Params window_params(const kernels::Window& window);
  static kernels::Window window_of(const Params& params);

 private:
  struct Tensor {
    TensorInfo info;
    std::string data;
  };
  struct Op {
    format::OpCode code;
    std::string name;
    std::vector<int> inputs;
    int output;
    kernels::Activation activation;
    Params params;
  };
  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  int input_ = -1, output_ = -1;
};

}  // namespace kiln::lite

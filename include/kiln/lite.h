// kiln::lite: the small inference runtime (libkiln_lite). It loads a model file written by
// kiln::lite::convert (kiln/lite_convert.h) by memory-mapping it and runs it with int8 and float
// kernels. It depends on the C++ standard library only: no LLVM, protobuf, Eigen or libkiln.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"  // header-only: the lite runtime throws kiln::Error too

namespace kiln::lite {

enum class DType : uint8_t { kFloat32 = 0, kInt8 = 1, kInt32 = 2 };
const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);

// A tensor of the model: its shape has -1 for the batch dimension of the activations. An int8
// tensor's real value is scale * (q - zero_point); a per-channel weight's scales are a float
// tensor of their own (the op's fourth input).
struct TensorInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  float scale = 0.f;
  int32_t zero_point = 0;
  bool constant = false;
};

struct OpInfo {
  std::string name;         // the layer it came from ("conv2d_1")
  std::string type;         // "FullyConnected", "Conv2D", ...
  std::vector<int> inputs;  // tensor indices; -1 for an absent optional input
  int output = -1;
  // Runs inside the op before it: a MaxPool2D fused into the Conv2D it pools (its output is
  // written by that op; its own time is 0).
  bool fused = false;
};

struct Options {
  int num_threads = 1;  // threads that split each op's rows (1: the caller's thread only)
  // Keep every intermediate tensor readable after run (tensor_data); otherwise their buffers
  // are shared between tensors whose lifetimes do not overlap.
  bool preserve_all_tensors = false;
  // Time each op (op_seconds()); off, a run reads no clock.
  bool profile = false;
};

// A loaded model. Load errors are kiln::Error: kNotFound (no such file), kDataLoss (truncated,
// damaged, not a Kiln lite file: the message names the offset), kUnimplemented (a newer file
// version), kInvalidArgument (a graph whose ops or shapes do not chain: it names the op).
class Interpreter {
 public:
  // Memory-maps the file; the mapping lives as long as the interpreter.
  static std::unique_ptr<Interpreter> load(const std::string& path, const Options& options = {});
  // Reads a model from memory (copied).
  static std::unique_ptr<Interpreter> from_buffer(const void* data, size_t size,
                                                  const Options& options = {});
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  const TensorInfo& input() const;   // the model's (single) input
  const TensorInfo& output() const;  // and output
  int64_t input_size() const;        // elements per example
  int64_t output_size() const;

  // Runs `batch` examples of input() laid out contiguously (float for a float input). Returns
  // the output, `batch * output_size()` floats (an int8 output is dequantized).
  std::vector<float> run(const float* input, int64_t batch);
  // Writes the output into `output` instead (no allocation after the first run of a batch).
  void run(const float* input, int64_t batch, float* output);

  // The graph, for tools and reports.
  int tensor_count() const;
  const TensorInfo& tensor(int index) const;
  const std::vector<OpInfo>& ops() const;
  // A tensor's values after the last run (its constants any time). Activations stay readable
  // only under Options::preserve_all_tensors (else kFailedPrecondition), except the output.
  const void* tensor_data(int index) const;
  int64_t last_batch() const;
  // Under Options::profile: each op's wall seconds, summed over every run since load.
  const std::vector<double>& op_seconds() const;
  // Which kernels run: "avx512-vnni", "generic", ... for int8 and float.
  std::string kernel_paths() const;
  size_t file_size() const;

 private:
  struct Impl;
  explicit Interpreter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::lite

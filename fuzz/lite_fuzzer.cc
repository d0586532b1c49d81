// Fuzzes kiln::lite::Interpreter::from_buffer, then the loaded model's run. The input is the
// model file; the harness rewrites its checksum first (when it has a header), so the fuzzer
// works on the checks behind it (the checksum's own are unit tests). Checks: a load ends in a
// model or kiln::Error kDataLoss / kInvalidArgument / kUnimplemented; a model small enough to
// run in the time limit runs at batch 1 and 3 (or runs out of memory: kResourceExhausted) and
// gives batch * output_size() values.
#include <vector>

#include "fuzz/fuzz_file.h"
#include "kiln/error.h"
#include "kiln/lite.h"
#include "lite/format.h"

namespace {

// Multiply-adds of one example, roughly: each op's output elements times its weights' row.
double work_per_example(const kiln::lite::Interpreter& m) {
  double total = 0;
  for (const kiln::lite::OpInfo& op : m.ops()) {
    double out = 1;
    for (size_t d = 1; d < m.tensor(op.output).shape.size(); ++d)
      out *= m.tensor(op.output).shape[d];
    double row = 1;
    if (op.inputs.size() > 1 && op.inputs[1] >= 0) {
      const std::vector<int64_t>& w = m.tensor(op.inputs[1]).shape;
      for (size_t d = 1; d < w.size(); ++d) row *= w[d];
    }
    total += out * row * 4;  // pools read a window per output
  }
  return total;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> file(data, data + size);
  if (size >= kiln::lite::format::kHeaderSize) {
    kiln::lite::format::put(file.data() + 24, kiln::lite::format::file_checksum(file.data(), size),
                            4);
  }
  std::unique_ptr<kiln::lite::Interpreter> model;
  try {
    model = kiln::lite::Interpreter::from_buffer(file.data(), file.size());
  } catch (const kiln::Error& e) {
    kiln::fuzz::note(e);
    kiln::fuzz::check(e.code() == kiln::ErrorCode::kDataLoss ||
                      e.code() == kiln::ErrorCode::kInvalidArgument ||
                      e.code() == kiln::ErrorCode::kUnimplemented);
    return 0;
  }
  if (work_per_example(*model) > 2e7) return 0;
  for (int64_t batch : {1, 3}) {
    std::vector<float> x(batch * model->input_size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
    try {
      const std::vector<float> y = model->run(x.data(), batch);
      kiln::fuzz::check(static_cast<int64_t>(y.size()) == batch * model->output_size());
    } catch (const kiln::Error& e) {
      kiln::fuzz::note(e);
      kiln::fuzz::check(e.code() == kiln::ErrorCode::kResourceExhausted);
    }
  }
  return 0;
}

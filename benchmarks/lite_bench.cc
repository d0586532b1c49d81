// Issue #32: the small runtime on the Fashion-MNIST CNN and MLP (weights as initialised; speed
// does not depend on training). In one process, calls alternated, medians of per-call times:
// the int8 lite model against the float lite model and against libkiln's predict, at batch 1
// (latency) and 64 (throughput); the float lite model against predict at batch 1
// (lite_vs_full_runtime); and the int8 file's size against the float lite file and the saved
// model. Both runtimes use 2 threads. Prints `RESULT key=value` lines, and the kernel paths.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "benchmarks/bench_util.h"
#include "kiln/lite.h"
#include "kiln/lite_convert.h"
#include "kiln/nn.h"
#include "kiln/nn/saving.h"
#include "kiln/ops.h"

namespace {

using namespace kiln::nn;
using namespace kiln::bench;

int64_t directory_bytes(const std::string& dir) {
  int64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

void bench(const std::string& name, Sequential& model, const kiln::Shape& example) {
  kiln::Shape calib_shape{512};
  calib_shape.insert(calib_shape.end(), example.begin(), example.end());
  model.build(example);
  const std::string dir = "/tmp/kiln_lite_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  kiln::lite::ConvertOptions options;
  options.quantize = false;
  const auto f32 = kiln::lite::convert(model, dir + "/f32.klite", options);
  options.quantize = true;
  options.representative = kiln::random_uniform(calib_shape, 1);
  const auto int8 = kiln::lite::convert(model, dir + "/int8.klite", options);
  const std::string saved = kiln::io::save_model(model, dir + "/saved");
  const int64_t saved_bytes = directory_bytes(saved);

  kiln::lite::Options lite_options;
  lite_options.num_threads = 2;
  auto lite_f32 = kiln::lite::Interpreter::load(dir + "/f32.klite", lite_options);
  auto lite_int8 = kiln::lite::Interpreter::load(dir + "/int8.klite", lite_options);
  std::printf("%s kernels: %s\n", name.c_str(), lite_int8->kernel_paths().c_str());

  for (int64_t batch : {1, 64}) {
    kiln::Shape shape{batch};
    shape.insert(shape.end(), example.begin(), example.end());
    const kiln::Tensor x = kiln::random_uniform(shape, 2);
    const std::vector<float> xv = x.to_vector<float>();
    std::vector<float> out(batch * lite_f32->output_size());
    auto run_f32 = [&] { lite_f32->run(xv.data(), batch, out.data()); };
    auto run_int8 = [&] { lite_int8->run(xv.data(), batch, out.data()); };
    auto predict = [&] { model.predict(x, batch); };
    const int calls = batch == 1 ? 2001 : 201;
    const auto [t_f32, t_int8] = interleaved_median_seconds(run_f32, run_int8, calls);
    const auto [t_predict, t_int8b] = interleaved_median_seconds(predict, run_int8, calls);
    const std::string b = "_b" + std::to_string(batch);
    result("lite_" + name + b + "_f32_us", t_f32 * 1e6);
    result("lite_" + name + b + "_int8_us", t_int8 * 1e6);
    result("kiln_" + name + b + "_predict_us", t_predict * 1e6);
    result("int8_" + name + b + "_vs_f32", t_f32 / t_int8);
    result("int8_" + name + b + "_vs_kiln_predict", t_predict / t_int8b);
    if (batch == 1) {
      const auto [t_predict1, t_f32b] = interleaved_median_seconds(predict, run_f32, calls);
      result("lite_vs_full_runtime_" + name, t_predict1 / t_f32b);
    }
  }
  result("lite_" + name + "_int8_bytes", static_cast<double>(int8.file_bytes));
  result("lite_" + name + "_int8_vs_f32_file",
         static_cast<double>(int8.file_bytes) / f32.file_bytes);
  result("lite_" + name + "_int8_vs_saved_model",
         static_cast<double>(int8.file_bytes) / saved_bytes);
  if (const char* keep = std::getenv("KILN_LITE_BENCH_KEEP")) {
    // Keeps the files (for kiln-lite-run --profile=1) in the named directory.
    std::filesystem::create_directories(keep);
    for (const std::string f : {"f32.klite", "int8.klite"}) {
      std::filesystem::copy_file(dir + "/" + f, std::string(keep) + "/" + name + "_" + f,
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> cases = selected_cases(argc, argv, {"cnn", "mlp"});
  for (const std::string& c : cases) {
    if (c == "cnn") {
      Sequential cnn({Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"),
                      MaxPool2D({2, 2}), Flatten(), Dense(128, "relu"), Dense(10)});
      bench("cnn", cnn, {28, 28, 1});
    } else {
      Sequential mlp({Dense(128, "relu"), Dropout(0.2), Dense(10)});
      bench("mlp", mlp, {784});
    }
  }
  return 0;
}

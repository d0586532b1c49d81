// Trains the Fashion-MNIST MLP or CNN, converts it for the small runtime as float and as int8
// (post-training quantization, calibrated on 2,048 training images), then fine-tunes it for
// --qat_epochs with quantization-aware training and converts it again; compares the test
// accuracy of the Kiln model, the float lite file, and the int8 files of PTQ and QAT. Exits 3
// when PTQ's int8 accuracy falls more than --max_drop below the float model's, or QAT's more
// than --max_qat_drop.
//
//   lite_quantize --model=cnn [--out_dir=DIR] [--max_drop=0.01] [--qat_epochs=1]
//                 [--max_qat_drop=0.005] [trainer flags: --epochs, ...]
#include <sys/stat.h>

#include <cstdio>
#include <iostream>

#include "examples/common/trainer.h"
#include "kiln/io/saved_model.h"
#include "kiln/lite.h"
#include "kiln/lite_convert.h"

namespace {

double lite_accuracy(const std::string& path, const kiln::Tensor& x, const kiln::Tensor& y) {
  auto interp = kiln::lite::Interpreter::load(path, {.num_threads = 2});
  const std::vector<float> images = x.to_vector<float>();
  const std::vector<int64_t> labels = y.to_vector<int64_t>();
  const int64_t n = x.dim(0), classes = interp->output_size();
  const std::vector<float> out = interp->run(images.data(), n);
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = out.data() + i * classes;
    correct += std::max_element(row, row + classes) - row == labels[i];
  }
  return static_cast<double>(correct) / n;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags parsed(argc, argv);
  const std::string kind = parsed.choice("model", "cnn", {"mlp", "cnn"});
  const std::string out_dir = parsed.str("out_dir", "/tmp");
  const double max_drop = std::stod(parsed.str("max_drop", kind == "cnn" ? "0.01" : "0.005"));
  const double max_qat_drop = std::stod(parsed.str("max_qat_drop", "0.005"));
  const int qat_epochs = static_cast<int>(parsed.integer("qat_epochs", 1, 0, 100));
  const examples::TrainerFlags flags(parsed, /*default_batch_size=*/kind == "cnn" ? 128 : 64);
  try {
    using namespace kiln::nn;
    examples::TrainerData data = examples::load_trainer_data(
        flags, kind == "cnn" ? kiln::Shape{28, 28, 1} : kiln::Shape{784});
    Sequential model =
        kind == "cnn"
            ? Sequential({Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"),
                          MaxPool2D({2, 2}), Flatten(), Dense(128, "relu"), Dense(10)})
            : Sequential({Dense(128, "relu"), Dropout(0.2), Dense(10)});
    model.set_seed(flags.seed);
    model.compile(kiln::optim::Adam(examples::cosine_learning_rate(flags, data.x_train.dim(0))),
                  SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"},
                  {.device = flags.compile_device()});
    examples::train_and_report(model, flags, data, /*eval_batch_size=*/500);
    const double float_accuracy = model.evaluate(data.x_test, data.y_test, 500)["accuracy"];

    ::mkdir(out_dir.c_str(), 0755);
    const std::string float_path = out_dir + "/fashion_mnist_" + kind + "_f32.klite";
    const std::string int8_path = out_dir + "/fashion_mnist_" + kind + "_int8.klite";
    kiln::lite::ConvertOptions options;
    options.quantize = false;
    const auto float_report = kiln::lite::convert(model, float_path, options);
    options.quantize = true;
    options.representative = kiln::slice(data.x_train, kiln::Axes(data.x_train.rank(), 0), [&] {
      kiln::Axes limit(data.x_train.shape().begin(), data.x_train.shape().end());
      limit[0] = 2048;
      return limit;
    }());
    const auto int8_report = kiln::lite::convert(model, int8_path, options);
    std::cout << int8_report.str();
    // The trained model exported as a saved model too, for kiln-lite-convert (the test converts
    // it from the command line and expects this int8 file again, byte for byte).
    kiln::io::save_model(model, out_dir + "/fashion_mnist_" + kind + "_saved");

    const double lite_float = lite_accuracy(float_path, data.x_test, data.y_test);
    const double lite_int8 = lite_accuracy(int8_path, data.x_test, data.y_test);

    // QAT: fine-tune through fake quantization at a tenth of the learning rate, then convert the
    // model (whose weights the QAT model trained) again.
    double qat_int8 = lite_int8;
    if (qat_epochs > 0) {
      std::unique_ptr<Sequential> qat = kiln::lite::quantization_aware(model, options);
      qat->compile(kiln::optim::Adam(flags.learning_rate / 10),
                   SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"},
                   {.device = flags.compile_device()});
      qat->fit(data.x_train, data.y_train,
               FitOptions()
                   .set_epochs(qat_epochs)
                   .set_batch_size(flags.batch_size)
                   .set_seed(flags.seed)
                   .set_verbose(0));
      const std::string qat_path = out_dir + "/fashion_mnist_" + kind + "_qat_int8.klite";
      kiln::lite::convert(model, qat_path, options);
      qat_int8 = lite_accuracy(qat_path, data.x_test, data.y_test);
    }
    std::printf(
        "lite: float_accuracy=%.4f lite_f32_accuracy=%.4f lite_int8_accuracy=%.4f "
        "int8_drop=%.4f qat_int8_accuracy=%.4f qat_drop=%.4f f32_bytes=%lld int8_bytes=%lld "
        "size_ratio=%.3f\n",
        float_accuracy, lite_float, lite_int8, float_accuracy - lite_int8, qat_int8,
        float_accuracy - qat_int8, static_cast<long long>(float_report.file_bytes),
        static_cast<long long>(int8_report.file_bytes),
        static_cast<double>(int8_report.file_bytes) / float_report.file_bytes);
    if (float_accuracy - lite_int8 > max_drop) {
      std::cerr << "int8 (PTQ) accuracy dropped by more than " << max_drop << "\n";
      return 3;
    }
    if (float_accuracy - qat_int8 > max_qat_drop) {
      std::cerr << "int8 (QAT) accuracy dropped by more than " << max_qat_drop << "\n";
      return 3;
    }
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

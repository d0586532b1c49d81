// kiln-lite-convert: a model on disk to a lite file, as TF Lite's converter does from the
// command line.
//
//   kiln-lite-convert MODEL OUT.klite [--float] [--representative=IDX] [--examples=N]
//                     [--calibration=minmax|percentile] [--percentile=P]
//
// MODEL is an exported saved model directory (io::save_model) or a model saved whole (a .kiln
// file). int8 by default, calibrated on the first N (default 2048) examples of an IDX file
// (u8 images are scaled to [0, 1], as the bundled trainers read them), reshaped to the model's
// input; --float writes a float file and needs no data. Prints the conversion report.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "kiln/data/idx.h"
#include "kiln/error.h"
#include "kiln/io/saved_model.h"
#include "kiln/lite_convert.h"
#include "kiln/nn/saving.h"
#include "kiln/ops.h"
#include "kiln/shape.h"

namespace {

using kiln::Error;
using kiln::ErrorCode;

// The model's input shape, batch first.
kiln::Shape input_shape(const std::string& model) {
  std::error_code error;
  if (std::filesystem::is_directory(model, error)) {
    const kiln::io::SavedModelInfo info = kiln::io::describe_saved_model(model);
    auto it = info.signatures.find("serving_default");
    if (it == info.signatures.end() || it->second.inputs.size() != 1) {
      throw Error(ErrorCode::kUnimplemented, model + ": no serving_default signature of one input");
    }
    return it->second.inputs.begin()->second.shape;
  }
  std::unique_ptr<kiln::nn::Model> m =
      kiln::nn::load_model(model, kiln::nn::LoadOptions().set_compile(false));
  if (!m->input_type()) throw Error(ErrorCode::kInvalidArgument, model + " is not built");
  return m->input_type()->shape;
}

// The first `examples` rows of an IDX file as f32 (u8 scaled by 1/255) shaped [n, input...].
kiln::Tensor representative(const std::string& path, int64_t examples, const kiln::Shape& input) {
  kiln::Tensor raw = kiln::data::read_idx(path);
  if (raw.rank() < 1 || raw.dim(0) == 0) {
    throw Error(ErrorCode::kInvalidArgument, path + " holds no examples");
  }
  const int64_t n = std::min(examples, raw.dim(0)), per = raw.size() / raw.dim(0);
  int64_t want = 1;
  for (size_t i = 1; i < input.size(); ++i) want *= input[i];
  if (per != want) {
    throw Error(ErrorCode::kInvalidArgument,
                path + ": examples of " + std::to_string(per) + " values, the model's input " +
                    kiln::shape_str(input) + " takes " + std::to_string(want));
  }
  std::vector<float> values(n * per);
  if (raw.dtype() == kiln::u8) {
    const auto bytes = raw.to_vector<uint8_t>();
    for (size_t i = 0; i < values.size(); ++i) values[i] = bytes[i] / 255.0f;
  } else {
    const auto all = raw.to(kiln::f32).to_vector<float>();
    std::copy(all.begin(), all.begin() + static_cast<int64_t>(values.size()), values.begin());
  }
  kiln::Shape shape = input;
  shape[0] = n;
  return kiln::Tensor::from_vector(values, shape);
}

int run(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string data;
  int64_t examples = 2048;
  kiln::lite::ConvertOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& name) -> const char* {
      const std::string prefix = "--" + name + "=";
      return a.rfind(prefix, 0) == 0 ? a.c_str() + prefix.size() : nullptr;
    };
    if (a == "--float") {
      options.quantize = false;
    } else if (const char* v = value("representative")) {
      data = v;
    } else if (const char* v = value("examples")) {
      examples = std::stoll(v);
      if (examples < 1) throw Error(ErrorCode::kInvalidArgument, a + ": must be positive");
    } else if (const char* v = value("calibration")) {
      const std::string c = v;
      if (c != "minmax" && c != "percentile") {
        throw Error(ErrorCode::kInvalidArgument, a + ": minmax or percentile");
      }
      options.calibration =
          c == "minmax" ? kiln::lite::Calibration::kMinMax : kiln::lite::Calibration::kPercentile;
    } else if (const char* v = value("percentile")) {
      options.percentile = std::stod(v);
    } else if (a.rfind("--", 0) == 0) {
      throw Error(ErrorCode::kInvalidArgument, "unknown flag " + a);
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2 || (options.quantize && data.empty())) {
    std::cerr << "usage: kiln-lite-convert MODEL OUT.klite [--float] [--representative=IDX] "
                 "[--examples=N] [--calibration=minmax|percentile] [--percentile=P]\n"
                 "  MODEL: a saved model directory or a .kiln file; int8 needs "
                 "--representative\n";
    return 2;
  }
  if (options.quantize) {
    options.representative = representative(data, examples, input_shape(positional[0]));
    options.max_calibration_examples = 0;
  }
  const kiln::lite::ConversionReport report =
      kiln::lite::convert(positional[0], positional[1], options);
  std::cout << report.str();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln-lite-convert: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "kiln-lite-convert: " << e.what() << "\n";
  }
  return 1;
}

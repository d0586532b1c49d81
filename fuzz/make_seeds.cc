// Writes the seeds of the checkpoint and saved_model fuzz targets (corpus/<target>/seed_*):
// checkpoints and exported models made by Kiln itself, taken apart into the targets' input
// format. Built with the fuzz targets; run by hand: build/fuzz/make_fuzz_seeds fuzz/corpus
// (python3 fuzz/make_seeds.py writes the other targets' seeds).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "kiln/io/checkpoint.h"
#include "kiln/io/saved_model.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string part(const std::string& bytes) {
  std::string out = {static_cast<char>(bytes.size() & 0xff), static_cast<char>(bytes.size() >> 8)};
  return out + bytes;
}

// The one record of a TFRecord file (the targets frame it themselves).
std::string record_of(const fs::path& p) { return kiln::io::read_records(p.string()).at(0); }

// The data file next to a checkpoint's index.
std::string data_of(const std::string& prefix) {
  return read_file(kiln::io::read_checkpoint_index(prefix).data_path);
}

void write_seed(const fs::path& corpus, const std::string& target, const std::string& name,
                const std::string& bytes) {
  fs::create_directories(corpus / target);
  std::ofstream(corpus / target / ("seed_" + name), std::ios::binary) << bytes;
  std::printf("%s/seed_%s: %zu bytes\n", target.c_str(), name.c_str(), bytes.size());
}

void checkpoint_seeds(const fs::path& corpus, const fs::path& tmp) {
  const std::string prefix = kiln::io::save_checkpoint(
      (tmp / "ckpt").string(),
      {{"a", kiln::Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
       {"b", kiln::Tensor::from_vector<int64_t>({-1, 0, 1, 1LL << 40})},
       {"c", kiln::Tensor::from_vector(std::vector<bool>{true, false, true})},
       {"d", kiln::Tensor::scalar<double>(0.5)},
       {"e", kiln::Tensor::empty(kiln::u8, {0, 4})}},
      {{"epoch", int64_t{3}}, {"model", std::string("mlp")}});
  const std::string index = record_of(prefix + ".index"), data = data_of(prefix);
  write_seed(corpus, "checkpoint", "by_prefix", part(index) + part("") + data);
  write_seed(corpus, "checkpoint", "by_directory",
             part(index) + part("model_checkpoint_path: \"ckpt\"\n") + data);
}

void saved_model_seed(const fs::path& corpus, const fs::path& tmp, const std::string& name,
                      kiln::nn::Model& model, const kiln::Shape& input_shape,
                      kiln::DType dtype = kiln::f32) {
  model.build(input_shape, dtype);
  const fs::path version = kiln::io::save_model(model, (tmp / name).string(), input_shape, dtype);
  const std::string prefix = (version / "variables" / "variables").string();
  write_seed(corpus, "saved_model", name,
             part(record_of(version / "saved_model.pb")) + part(record_of(prefix + ".index")) +
                 data_of(prefix));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_fuzz_seeds CORPUS_DIR (fuzz/corpus)\n";
    return 2;
  }
  const fs::path corpus = argv[1];
  const fs::path tmp = fs::temp_directory_path() / ("kiln_fuzz_seeds_" + std::to_string(getpid()));
  fs::remove_all(tmp);
  try {
    checkpoint_seeds(corpus, tmp);
    using namespace kiln::nn;
    Sequential mlp({Dense(3, "relu"), Dropout(0.5), Dense(2)});
    mlp.set_seed(1);
    saved_model_seed(corpus, tmp, "mlp", mlp, {4});
    Sequential cnn({Conv2D(2, {3, 3}, "relu"), MaxPool2D({2, 2}), Flatten(), Dense(2)});
    cnn.set_seed(1);
    saved_model_seed(corpus, tmp, "cnn", cnn, {6, 6, 1});
    // Index inputs (gather: ids out of range), normalizations, attention's batched dots.
    Sequential embedding({Embedding(5, 3), LayerNormalization(), Flatten(), Dense(2)});
    embedding.set_seed(1);
    saved_model_seed(corpus, tmp, "embedding", embedding, {4}, kiln::i64);
    Sequential attention({MultiHeadAttention(2, 2), BatchNormalization(), Flatten(), Dense(2)});
    attention.set_seed(1);
    saved_model_seed(corpus, tmp, "attention", attention, {3, 4});
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    fs::remove_all(tmp);
    return 1;
  }
  fs::remove_all(tmp);
  return 0;
}

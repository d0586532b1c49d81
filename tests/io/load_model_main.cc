// Loads an exported model in a process that has none of the model's code (only kiln and the
// custom op the model uses) and runs it: load_model_main <model_dir> <in_prefix> <out_prefix>
// reads tensor "x" from the checkpoint <in_prefix>, writes predict(x) as tensor "y" of the
// checkpoint <out_prefix>, and prints the signatures. Exit 1 with the error message on failure.
#include <cstdio>

#include "kiln/io/checkpoint.h"
#include "kiln/io/saved_model.h"
#include "tests/io/export_test_op.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <model_dir> <in_prefix> <out_prefix>\n", argv[0]);
    return 2;
  }
  try {
    kiln::io::LoadedModel model = kiln::io::load_model(argv[1]);
    for (const auto& [name, sig] : model.signatures()) {
      for (const auto& [in, type] : sig.inputs)
        std::printf("%s input %s %s\n", name.c_str(), in.c_str(), type.str().c_str());
      for (const auto& [out, type] : sig.outputs)
        std::printf("%s output %s %s\n", name.c_str(), out.c_str(), type.str().c_str());
    }
    kiln::io::Checkpoint in = kiln::io::load_checkpoint(argv[2]);
    kiln::Tensor y = model.predict(in.tensors.at("x"));
    kiln::io::save_checkpoint(argv[3], {{"y", y}});
    std::printf("predicted %s\n", kiln::TensorType{y.dtype(), y.shape()}.str().c_str());
  } catch (const std::exception& e) {  // kiln::Error, or a missing tensor "x"
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

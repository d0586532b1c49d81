// Fuzzes io::load_checkpoint. Input: [2-byte length][the index record: a CheckpointIndex proto]
// [2-byte length][the "checkpoint" pointer file, text; empty: none][the data file]. The harness
// frames the index as the one TFRecord of ckpt.index (framing has its own target) and writes the
// data file under the name the index gives. With a pointer file the checkpoint is loaded by its
// directory, else by its prefix. Checks: tensors that match their index entries, or
// kiln::Error kDataLoss / kNotFound.
#include <string>

#include "fuzz/fuzz_file.h"
#include "kiln/error.h"
#include "kiln/io/checkpoint.h"
#include "kiln/shape.h"
#include "src/api/io/proto/checkpoint.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::ScratchDir scratch;
  kiln::fuzz::Parts parts(data, size);
  const std::string_view index = parts.part(), pointer = parts.part(), data_file = parts.rest();
  const std::string& dir = scratch.reset();
  scratch.write("ckpt.index", kiln::fuzz::tfrecord(index));
  if (!pointer.empty()) scratch.write("checkpoint", pointer);
  kiln::proto::CheckpointIndex parsed;
  std::string data_name = "ckpt.data";
  if (parsed.ParseFromArray(index.data(), static_cast<int>(index.size())) &&
      kiln::fuzz::safe_file_name(parsed.data_file()) && parsed.data_file() != "ckpt.index" &&
      parsed.data_file() != "checkpoint") {
    data_name = parsed.data_file();
  }
  scratch.write(data_name, data_file);

  try {
    kiln::io::Checkpoint ckpt = kiln::io::load_checkpoint(pointer.empty() ? dir + "/ckpt" : dir);
    for (const auto& [name, t] : ckpt.tensors) {
      kiln::fuzz::check(t.defined() && !name.empty());
      kiln::fuzz::check(t.nbytes() == static_cast<size_t>(kiln::num_elements(t.shape())) *
                                          kiln::dtype_size(t.dtype()));
    }
  } catch (const kiln::Error& e) {
    kiln::fuzz::note(e);
    kiln::fuzz::check(e.code() == kiln::ErrorCode::kDataLoss ||
                      e.code() == kiln::ErrorCode::kNotFound);
  }
  return 0;
}

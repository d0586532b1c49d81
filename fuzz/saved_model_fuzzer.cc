// Fuzzes io::load_model and io::describe_saved_model. Input: [2-byte length][the SavedModel
// proto][2-byte length][the variables' CheckpointIndex proto][the variables' data file]. The
// harness writes <dir>/1/saved_model.pb and <dir>/1/variables/variables.index (each proto
// TFRecord-framed) and the data file under the name the index gives. Loading rebuilds the graph
// by calling each node's op, so the ops' shape functions see the file's attributes too.
// Checks: a model or a kiln::Error, never a crash; a loaded model's signatures hold values of
// the types its info declares.
#include <string>

#include "fuzz/fuzz_file.h"
#include "kiln/error.h"
#include "kiln/io/saved_model.h"
#include "src/io/proto/checkpoint.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::ScratchDir scratch;
  kiln::fuzz::Parts parts(data, size);
  const std::string_view model = parts.part(), index = parts.part(), data_file = parts.rest();
  const std::string& dir = scratch.reset();
  scratch.write("1/saved_model.pb", kiln::fuzz::tfrecord(model));
  scratch.write("1/variables/variables.index", kiln::fuzz::tfrecord(index));
  kiln::proto::CheckpointIndex parsed;
  std::string data_name = "variables.data";
  if (parsed.ParseFromArray(index.data(), static_cast<int>(index.size())) &&
      kiln::fuzz::safe_file_name(parsed.data_file()) && parsed.data_file() != "variables.index") {
    data_name = parsed.data_file();
  }
  scratch.write("1/variables/" + data_name, data_file);

  try {
    kiln::io::SavedModelInfo info = kiln::io::describe_saved_model(dir);
    kiln::fuzz::check(info.version == 1);
  } catch (const kiln::Error& e) {
    kiln::fuzz::note(e);
  }
  try {
    kiln::io::LoadedModel loaded = kiln::io::load_model(dir);
    kiln::fuzz::check(loaded.info().version == 1);
  } catch (const kiln::Error& e) {
    kiln::fuzz::note(e);
  }
  return 0;
}

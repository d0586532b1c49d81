// Fuzzes data::read_idx on raw and gzip-compressed IDX files (the input is the file). Checks
// that reading ends in a tensor whose size matches its shape, or in kiln::Error.
#include "fuzz/fuzz_file.h"
#include "kiln/data/idx.h"
#include "kiln/error.h"
#include "kiln/shape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::MemoryFile file;
  try {
    kiln::Tensor t = kiln::data::read_idx(file.write(data, size));
    kiln::fuzz::check(t.defined() && t.size() == kiln::num_elements(t.shape()));
    kiln::fuzz::check(t.nbytes() == static_cast<size_t>(t.size()) * kiln::dtype_size(t.dtype()));
  } catch (const kiln::Error& e) {
    kiln::fuzz::note(e);
    kiln::fuzz::check(e.code() == kiln::ErrorCode::kDataLoss);
  }
  return 0;
}

// Fuzzes io::RecordReader. Input: one byte choosing the compression (low 2 bits: none, gzip,
// zlib) and skip_corrupt (bit 2), then the file's bytes. Checks that reading ends in records
// or kiln::Error (never a crash or another exception), that an uncompressed file read
// without corruption is exactly the framing of the records read, and that next_into (reading
// into the caller's storage) gives the same records or the same error as next.
#include <string>
#include <vector>

#include "fuzz/fuzz_file.h"
#include "kiln/error.h"
#include "kiln/io/tfrecord.h"
#include "src/api/io/crc32c.h"

namespace {

void append_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

std::string framing(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) {
    std::string header;
    append_le(header, r.size(), 8);
    append_le(header, kiln::io::crc32c::mask(kiln::io::crc32c::value(header)), 4);
    out += header + r;
    append_le(out, kiln::io::crc32c::mask(kiln::io::crc32c::value(r)), 4);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kiln::fuzz::MemoryFile file;
  if (size < 1) return 0;
  kiln::io::RecordReaderOptions options;
  const int mode = data[0] & 3;
  if (mode == 3) return -1;  // not a compression: keep out of the corpus
  options.compression = static_cast<kiln::io::Compression>(mode);
  options.skip_corrupt = (data[0] & 4) != 0;
  const std::string& path = file.write(data + 1, size - 1);
  std::vector<std::string> records;
  std::string error;
  try {
    kiln::io::RecordReader reader(path, options);
    for (std::string record; reader.next(record);) records.push_back(std::move(record));
    kiln::fuzz::check(!reader.next().has_value());  // the end stays the end
    if (options.compression == kiln::io::Compression::kNone && reader.corrupt_records() == 0) {
      const std::string expected = framing(records);
      kiln::fuzz::check(expected.size() == size - 1 &&
                        expected.compare(0, expected.size(),
                                         reinterpret_cast<const char*>(data + 1), size - 1) == 0);
      kiln::fuzz::check(reader.offset() == size - 1);
    }
    if (reader.corrupt_records() > 0) kiln::fuzz::check(!reader.last_corruption().empty());
  } catch (const kiln::Error& e) {
    kiln::fuzz::note(e);
    kiln::fuzz::check(!options.skip_corrupt || e.code() != kiln::ErrorCode::kDataLoss);
    error = e.what();
  }
  std::vector<std::string> direct;
  std::string direct_error;
  try {
    kiln::io::RecordReader reader(path, options);
    std::string storage;
    auto allocate = [&](size_t n) {
      storage.assign(n, '\0');
      return reinterpret_cast<uint8_t*>(storage.data());
    };
    while (reader.next_into(allocate)) direct.push_back(storage);
  } catch (const kiln::Error& e) {
    direct_error = e.what();
  }
  kiln::fuzz::check(direct == records && direct_error == error);
  return 0;
}

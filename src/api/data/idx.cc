// IDX reader and writer: a big-endian header and data, raw or inside a gzip stream (read and
// written through io's InputStream and OutputFile), with every size the header claims checked
// against the data before memory is committed to it.
#include "kiln/data/idx.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/shape.h"
#include "src/api/io/file_io.h"

namespace kiln::data {
namespace {

using io::internal::InputStream;
using io::internal::OutputFile;

constexpr int kMaxRank = 8;
// A gzip file's real size is unknown until it is inflated. Data claimed beyond this many bytes
// goes into a buffer that grows as the data arrives, so a corrupt header cannot make us
// allocate an absurd size up front.
constexpr uint64_t kMaxUpfrontBytes = uint64_t{256} << 20;
constexpr uint64_t kFirstGrowthBytes = uint64_t{16} << 20;
// write_idx byte-swaps wider elements through a buffer of this size.
constexpr size_t kWriteChunk = size_t{1} << 16;

struct IdxType {
  uint8_t code;
  DType dtype;
  int width;  // bytes per element in the file
  const char* name;
};
constexpr IdxType kIdxTypes[] = {
    {0x08, u8, 1, "u8"},   {0x09, i8, 1, "i8"},   {0x0B, i32, 2, "i16"},
    {0x0C, i32, 4, "i32"}, {0x0D, f32, 4, "f32"}, {0x0E, f64, 8, "f64"},
};

const IdxType* idx_type_of_code(uint8_t code) {
  for (const IdxType& t : kIdxTypes) {
    if (t.code == code) return &t;
  }
  return nullptr;
}

const IdxType* idx_type_of_dtype(DType dtype) {
  for (const IdxType& t : kIdxTypes) {
    if (t.dtype == dtype && t.width == static_cast<int>(dtype_size(dtype))) return &t;
  }
  return nullptr;
}

std::string hex_byte(uint8_t b) {
  char s[8];
  std::snprintf(s, sizeof s, "0x%02x", b);
  return s;
}

// Converts `count` big-endian elements of `width` bytes to host order, in place.
void big_endian_to_host(uint8_t* data, size_t count, int width) {
  if constexpr (std::endian::native == std::endian::big) return;
  if (width == 4) {
    for (size_t i = 0; i < count; ++i) {
      uint32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      v = __builtin_bswap32(v);
      std::memcpy(data + 4 * i, &v, 4);
    }
  } else if (width == 8) {
    for (size_t i = 0; i < count; ++i) {
      uint64_t v;
      std::memcpy(&v, data + 8 * i, 8);
      v = __builtin_bswap64(v);
      std::memcpy(data + 8 * i, &v, 8);
    }
  }
}
// The same swap turns host order into big-endian.
void host_to_big_endian(uint8_t* data, size_t count, int width) {
  big_endian_to_host(data, count, width);
}

// What holds the data, for messages about where it ends.
const char* data_name(const InputStream& in) {
  return in.compressed() ? "the decompressed stream" : "the file";
}

void read_header_bytes(InputStream& in, uint8_t* dst, size_t n, const std::string& what) {
  const uint64_t at = in.offset();
  if (in.read(dst, n) < n) {
    in.fail(ErrorCode::kDataLoss, "truncated header: expected " + what + " (" + std::to_string(n) +
                                      " bytes) at offset " + std::to_string(at) + ", but " +
                                      data_name(in) + " ends after " + std::to_string(in.offset()) +
                                      " bytes");
  }
}

[[noreturn]] void fail_truncated_data(const InputStream& in, uint64_t nbytes, uint64_t start,
                                      uint64_t got, const std::string& claim) {
  in.fail(ErrorCode::kDataLoss,
          "truncated data: expected " + std::to_string(nbytes) + " bytes of data at offset " +
              std::to_string(start) + " for " + claim + ", but " + data_name(in) + " ends after " +
              std::to_string(got) + " of them (at offset " + std::to_string(start + got) + ")");
}

// Reads `nbytes` of data into a new tensor of `dtype` and `shape` (as file bytes, not yet
// converted). Throws if the data ends first.
Tensor read_data_bytes(InputStream& in, DType dtype, const Shape& shape, uint64_t nbytes,
                       const std::string& claim) {
  const uint64_t start = in.offset();
  auto truncated = [&]() { fail_truncated_data(in, nbytes, start, in.offset() - start, claim); };
  if (in.remaining() || nbytes <= kMaxUpfrontBytes) {
    Tensor out = Tensor::empty(dtype, shape);
    if (in.read(static_cast<uint8_t*>(out.raw_mutable_data()), nbytes) < nbytes) truncated();
    return out;
  }
  // Believe a large claim only as far as the data goes: grow geometrically as it arrives.
  std::vector<uint8_t> buffer;
  while (buffer.size() < nbytes) {
    const size_t old = buffer.size();
    const size_t step = static_cast<size_t>(
        std::min<uint64_t>(nbytes - old, std::max<uint64_t>(old, kFirstGrowthBytes)));
    buffer.resize(old + step);
    if (in.read(buffer.data() + old, step) < step) truncated();
  }
  Tensor out = Tensor::empty(dtype, shape);
  std::memcpy(out.raw_mutable_data(), buffer.data(), nbytes);
  return out;
}

// Turns the file's big-endian elements, held at the start of `t`'s storage, into `t`'s values.
void convert_file_data(const IdxType& type, Tensor& t) {
  auto* bytes = static_cast<uint8_t*>(t.raw_mutable_data());
  const size_t count = static_cast<size_t>(t.size());
  if (type.width == 2) {
    // i16 widens to i32 in place: walking backwards, element i (bytes 2i..2i+1) is read
    // before element i's 4 output bytes overwrite the file bytes of elements >= i.
    auto* out = reinterpret_cast<int32_t*>(bytes);
    for (size_t i = count; i-- > 0;) {
      out[i] = static_cast<int16_t>((bytes[2 * i] << 8) | bytes[2 * i + 1]);
    }
    return;
  }
  big_endian_to_host(bytes, count, type.width);
}

[[noreturn]] void write_fail(const std::string& path, ErrorCode code, const std::string& what) {
  throw Error(code, "write_idx: " + path + ": " + what);
}

}  // namespace

Tensor read_idx(const std::string& path) {
  InputStream in(path, io::internal::detect_gzip(path), "read_idx");
  uint8_t magic[4];
  read_header_bytes(in, magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    in.fail(ErrorCode::kDataLoss,
            "bad magic number at offset 0: starts with " + hex_byte(magic[0]) + " " +
                hex_byte(magic[1]) +
                ", but an IDX file starts with two zero bytes, a type code and a rank");
  }
  const IdxType* type = idx_type_of_code(magic[2]);
  if (!type) {
    in.fail(ErrorCode::kDataLoss, "bad magic number: unknown IDX type code " + hex_byte(magic[2]) +
                                      " at offset 2 (known: 0x08 u8, 0x09 i8, 0x0b i16, "
                                      "0x0c i32, 0x0d f32, 0x0e f64)");
  }
  const int rank = magic[3];
  if (rank < 1 || rank > kMaxRank) {
    in.fail(ErrorCode::kDataLoss, "bad magic number: rank " + std::to_string(rank) +
                                      " at offset 3 is outside [1, " + std::to_string(kMaxRank) +
                                      "]");
  }

  uint8_t dims[4 * kMaxRank];
  read_header_bytes(in, dims, 4 * rank, std::to_string(rank) + " dimensions");
  Shape shape;
  bool overflow = false;
  bool has_zero = false;
  uint64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = (uint32_t{dims[4 * i]} << 24) | (uint32_t{dims[4 * i + 1]} << 16) |
                       (uint32_t{dims[4 * i + 2]} << 8) | dims[4 * i + 3];
    shape.push_back(d);
    has_zero = has_zero || d == 0;
    overflow = __builtin_mul_overflow(count, d, &count) || overflow;
  }
  if (has_zero) {  // a zero dimension empties the tensor, however large the others
    count = 0;
    overflow = false;
  }
  const std::string dims_claim = "dimensions " + shape_str(shape) + " at offset 4 claim ";
  if (overflow) in.fail(ErrorCode::kDataLoss, dims_claim + "more than 2^64 elements");
  uint64_t nbytes = 0;
  uint64_t tensor_bytes = 0;
  if (count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(count, static_cast<uint64_t>(type->width), &nbytes) ||
      __builtin_mul_overflow(count, dtype_size(type->dtype), &tensor_bytes) ||
      tensor_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    in.fail(ErrorCode::kDataLoss, dims_claim + std::to_string(count) + " elements of " +
                                      type->name + ", more than a tensor can hold");
  }
  const uint64_t data_start = in.offset();
  const std::string claim = "dimensions " + shape_str(shape) + " of " + type->name;

  // An uncompressed file's size is known: check the claim against it before allocating.
  if (auto left = in.remaining()) {
    const uint64_t available = *left;
    if (available < nbytes) fail_truncated_data(in, nbytes, data_start, available, claim);
    if (available > nbytes) {
      in.fail(ErrorCode::kDataLoss,
              std::to_string(available - nbytes) + " trailing bytes after the data, at offset " +
                  std::to_string(data_start + nbytes) + ": " + claim + " account for " +
                  std::to_string(nbytes) + " bytes of data");
    }
  }
  Tensor out = read_data_bytes(in, type->dtype, shape, nbytes, claim);
  uint8_t extra;
  if (in.read(&extra, 1) != 0) {
    in.fail(ErrorCode::kDataLoss, std::string("trailing bytes after the data, at offset ") +
                                      std::to_string(data_start + nbytes) +
                                      (in.compressed() ? " of the decompressed stream" : "") +
                                      ": " + claim + " account for " + std::to_string(nbytes) +
                                      " bytes of data");
  }
  convert_file_data(*type, out);
  return out;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  if (!t.defined()) write_fail(path, ErrorCode::kInvalidArgument, "the tensor is undefined");
  if (t.is_symbolic()) {
    write_fail(path, ErrorCode::kInvalidArgument,
               "tensor " + t.name() + " is symbolic: it has no data until its graph runs");
  }
  const IdxType* type = idx_type_of_dtype(t.dtype());
  if (!type) {
    write_fail(path, ErrorCode::kInvalidArgument,
               std::string("IDX has no element type for dtype ") + dtype_name(t.dtype()) +
                   " (it stores u8, i8, i32, f32 and f64)");
  }
  if (t.rank() < 1 || t.rank() > kMaxRank) {
    write_fail(path, ErrorCode::kInvalidArgument,
               "IDX stores tensors of rank 1 to 8, not rank " + std::to_string(t.rank()) +
                   " (shape " + shape_str(t.shape()) + ")");
  }
  std::vector<uint8_t> header = {0, 0, type->code, static_cast<uint8_t>(t.rank())};
  for (int64_t d : t.shape()) {
    if (d > std::numeric_limits<uint32_t>::max()) {
      write_fail(path, ErrorCode::kInvalidArgument,
                 "dimension " + std::to_string(d) + " of shape " + shape_str(t.shape()) +
                     " does not fit IDX's 32-bit dimensions");
    }
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<uint8_t>(d >> shift));
  }

  OutputFile file(path, OutputFile::Mode::kAtomic,
                  gzip ? io::Compression::kGzip : io::Compression::kNone, "write_idx");
  file.write(header.data(), header.size());
  const auto* data = static_cast<const uint8_t*>(t.raw_data());
  const size_t width = static_cast<size_t>(type->width);
  if (width == 1) {
    file.write(data, t.nbytes());
  } else {
    std::vector<uint8_t> chunk(kWriteChunk);
    const size_t per_chunk = kWriteChunk / width;
    for (size_t i = 0, n = static_cast<size_t>(t.size()); i < n; i += per_chunk) {
      const size_t count = std::min(per_chunk, n - i);
      std::memcpy(chunk.data(), data + i * width, count * width);
      host_to_big_endian(chunk.data(), count, type->width);
      file.write(chunk.data(), count * width);
    }
  }
  file.close();
}

}  // namespace kiln::data

// IDX files: hand-built raw and gzip bytes read back, write_idx round trips and exact bytes,
// and every kind of corrupt file rejected with the path and offset, without huge allocations.
#include "kiln/data/idx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::data {
namespace {

using Bytes = std::vector<uint8_t>;
using testing::HasSubstr;

// CRC-32 (IEEE, reflected, polynomial 0xedb88320), bit by bit, as gzip's trailer needs.
uint32_t crc32(const Bytes& data) {
  uint32_t c = 0xffffffffu;
  for (uint8_t b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void append_le32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A gzip member built by hand (RFC 1952/1951) from "stored" deflate blocks, so these tests do
// not depend on zlib to make their inputs.
Bytes gzip_stored(const Bytes& data) {
  Bytes out = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};  // magic, deflate, no flags, mtime, OS
  size_t pos = 0;
  do {
    const size_t len = std::min<size_t>(data.size() - pos, 65535);
    const bool final = pos + len == data.size();
    out.push_back(final ? 1 : 0);  // BFINAL, BTYPE=00 (stored)
    out.push_back(static_cast<uint8_t>(len));
    out.push_back(static_cast<uint8_t>(len >> 8));
    out.push_back(static_cast<uint8_t>(~len));
    out.push_back(static_cast<uint8_t>(~len >> 8));
    out.insert(out.end(), data.begin() + pos, data.begin() + pos + len);
    pos += len;
  } while (pos < data.size());
  append_le32(out, crc32(data));
  append_le32(out, static_cast<uint32_t>(data.size()));
  return out;
}

Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class IdxTest : public testing_util::TempDirTest {
 protected:
  std::string write_bytes(const std::string& name, const Bytes& bytes) const {
    return write_file(name, std::string(bytes.begin(), bytes.end()));
  }
  static Bytes file_bytes(const std::string& p) {
    const std::string bytes = read_file(p);
    return Bytes(bytes.begin(), bytes.end());
  }
  // Reads `bytes` from a raw file and from a hand-built gzip file; both must agree.
  Tensor read_both(const Bytes& bytes) const {
    Tensor raw = read_idx(write_bytes("raw.idx", bytes));
    Tensor gz = read_idx(write_bytes("gz.idx.gz", gzip_stored(bytes)));
    EXPECT_EQ(raw.dtype(), gz.dtype());
    EXPECT_EQ(raw.shape(), gz.shape());
    EXPECT_EQ(raw.nbytes(), gz.nbytes());
    if (raw.nbytes() == gz.nbytes() && raw.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(raw.raw_data(), gz.raw_data(), raw.nbytes()), 0);
    }
    return raw;
  }
  // The kiln::Error read_idx throws for a file holding `bytes`.
  Error read_error(const std::string& name, const Bytes& bytes) const {
    const std::string p = write_bytes(name, bytes);
    return test_values::thrown_error([&] { read_idx(p); });
  }
};

TEST(IdxHelpers, Crc32MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32(Bytes{'1', '2', '3', '4', '5', '6', '7', '8', '9'}), 0xcbf43926u);
}

TEST_F(IdxTest, ReadsU8MatrixRawAndGzip) {
  Tensor t = read_both({0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 255});
  EXPECT_EQ(t.dtype(), u8);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 2, 3, 4, 5, 255}));
}

TEST_F(IdxTest, ReadsI8) {
  Tensor t = read_both({0, 0, 0x09, 1, 0, 0, 0, 3, 0xff, 0x80, 0x7f});
  EXPECT_EQ(t.dtype(), i8);
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{-1, -128, 127}));
}

TEST_F(IdxTest, WidensI16ToI32) {
  Tensor t = read_both({0, 0, 0x0b, 1, 0, 0, 0, 4, 0xff, 0xfe, 0x01, 0x2c, 0x80, 0x00, 0x7f, 0xff});
  EXPECT_EQ(t.dtype(), i32);
  EXPECT_EQ(t.shape(), (Shape{4}));
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{-2, 300, -32768, 32767}));
}

TEST_F(IdxTest, ReadsBigEndianI32) {
  Tensor t = read_both({0, 0, 0x0c, 1, 0, 0, 0, 2, 0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff, 0xfe});
  EXPECT_EQ(t.dtype(), i32);
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{0x01020304, -2}));
}

TEST_F(IdxTest, ReadsBigEndianF32) {
  // 1.0f = 0x3f800000, -2.5f = 0xc0200000.
  Tensor t = read_both({0, 0, 0x0d, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0x3f, 0x80, 0, 0, 0xc0, 0x20, 0, 0});
  EXPECT_EQ(t.dtype(), f32);
  EXPECT_EQ(t.shape(), (Shape{1, 2}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.0f, -2.5f}));
}

TEST_F(IdxTest, ReadsBigEndianF64) {
  // 1.0 = 0x3ff0000000000000, -pi = 0xc00921fb54442d18.
  Tensor t = read_both({0, 0, 0x0e, 1, 0,    0,    0,    2,    0x3f, 0xf0, 0,    0,
                        0, 0, 0,    0, 0xc0, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18});
  EXPECT_EQ(t.dtype(), f64);
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1.0, -std::numbers::pi}));
}

TEST_F(IdxTest, ReadsRankEightAndZeroSizedDims) {
  Bytes rank8 = {0, 0, 0x08, 8};
  for (int i = 0; i < 8; ++i) rank8.insert(rank8.end(), {0, 0, 0, 1});
  rank8.push_back(42);
  Tensor t = read_both(rank8);
  EXPECT_EQ(t.shape(), Shape(8, 1));
  EXPECT_EQ(t.to_vector<int>(), std::vector<int>{42});

  Tensor empty = read_both({0, 0, 0x0d, 2, 0, 0, 0, 0, 0, 0, 0, 5});
  EXPECT_EQ(empty.shape(), (Shape{0, 5}));
  EXPECT_EQ(empty.size(), 0);

  // A zero dimension empties the tensor however large the others are.
  Tensor huge_empty =
      read_both({0, 0, 0x08, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0});
  EXPECT_EQ(huge_empty.shape(), (Shape{4294967295, 4294967295, 0}));
  EXPECT_EQ(huge_empty.size(), 0);
}

TEST_F(IdxTest, ReadsGzipStreamsOfManyBlocksAndMembers) {
  Bytes data = {0, 0, 0x08, 1, 0, 2, 0, 0};  // 131072 bytes: two stored blocks and a bit
  for (int i = 0; i < 131072; ++i) data.push_back(static_cast<uint8_t>(i * 7));
  Tensor t = read_idx(write_bytes("blocks.gz", gzip_stored(data)));
  ASSERT_EQ(t.shape(), (Shape{131072}));
  EXPECT_EQ(t.data<uint8_t>()[100000], static_cast<uint8_t>(100000 * 7));

  // gzip allows members back to back: the stream is their concatenation.
  Bytes head(data.begin(), data.begin() + 5);
  Bytes tail(data.begin() + 5, data.end());
  Tensor two = read_idx(write_bytes("members.gz", concat(gzip_stored(head), gzip_stored(tail))));
  ASSERT_EQ(two.shape(), (Shape{131072}));
  EXPECT_EQ(std::memcmp(two.raw_data(), t.raw_data(), t.nbytes()), 0);
}

TEST_F(IdxTest, WriteIdxWritesTheExactBigEndianBytes) {
  write_idx(path("u8.idx"), Tensor::from_list<uint8_t>({1, 2, 3, 4, 5, 255}, {2, 3}), false);
  EXPECT_EQ(file_bytes(path("u8.idx")),
            (Bytes{0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 255}));

  write_idx(path("f32.idx"), Tensor::from_list<float>({1.0f, -2.5f}), false);
  EXPECT_EQ(file_bytes(path("f32.idx")),
            (Bytes{0, 0, 0x0d, 1, 0, 0, 0, 2, 0x3f, 0x80, 0, 0, 0xc0, 0x20, 0, 0}));

  write_idx(path("i32.idx"), Tensor::from_list<int32_t>({0x01020304, -2}), false);
  EXPECT_EQ(file_bytes(path("i32.idx")),
            (Bytes{0, 0, 0x0c, 1, 0, 0, 0, 2, 1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe}));

  write_idx(path("f64.idx.gz"), Tensor::from_list<double>({1.0}), true);
  Bytes gz = file_bytes(path("f64.idx.gz"));
  ASSERT_GE(gz.size(), 18u);
  EXPECT_EQ(gz[0], 0x1f);
  EXPECT_EQ(gz[1], 0x8b);
  // The gzip trailer holds the CRC and size of the uncompressed IDX bytes.
  Bytes raw = {0, 0, 0x0e, 1, 0, 0, 0, 1, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0};
  Bytes trailer;
  append_le32(trailer, crc32(raw));
  append_le32(trailer, static_cast<uint32_t>(raw.size()));
  EXPECT_EQ(Bytes(gz.end() - 8, gz.end()), trailer);
}

TEST_F(IdxTest, WriteThenReadRoundTripsEveryTypeRawAndGzip) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<Tensor> tensors = {
      Tensor::from_list<uint8_t>({0, 1, 2, 3, 128, 255, 7, 8, 9, 10, 11, 12}, {2, 3, 2}),
      Tensor::from_list<int8_t>({-128, -1, 0, 1, 127}),
      Tensor::from_list<int32_t>({INT32_MIN, -1, 0, 1, 65536, INT32_MAX}, {3, 1, 2}),
      Tensor::from_list<float>({0.5f, -0.0f, inf, -inf, 1e-40f, 3.25f}, {1, 2, 3}),
      Tensor::from_list<double>({1.0 / 3, -1e300, 5e-324}, {1, 1, 1, 3}),
      Tensor::empty(f32, {0, 3}),
  };
  for (bool gzip : {false, true}) {
    for (const Tensor& t : tensors) {
      SCOPED_TRACE(std::string(dtype_name(t.dtype())) + shape_str(t.shape()) +
                   (gzip ? " gzip" : " raw"));
      write_idx(path("t.idx"), t, gzip);
      Tensor back = read_idx(path("t.idx"));
      EXPECT_EQ(back.dtype(), t.dtype());
      EXPECT_EQ(back.shape(), t.shape());
      ASSERT_EQ(back.nbytes(), t.nbytes());
      if (t.nbytes()) EXPECT_EQ(std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()), 0);
    }
  }
}

TEST_F(IdxTest, WriteReplacesAtomicallyAndLeavesNoTemporaryFiles) {
  write_idx(path("a.idx"), Tensor::from_list<uint8_t>({1, 2, 3}), true);
  write_idx(path("a.idx"), Tensor::from_list<uint8_t>({9}), true);
  EXPECT_EQ(read_idx(path("a.idx")).to_vector<int>(), std::vector<int>{9});
  EXPECT_EQ(files(), std::vector<std::string>{"a.idx"});
}

TEST_F(IdxTest, WriteRejectsWhatIdxCannotHold) {
  auto expect_invalid = [&](const Tensor& t, const std::string& what) {
    try {
      write_idx(path("bad.idx"), t, false);
      ADD_FAILURE() << "write_idx accepted " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("write_idx: " + path("bad.idx")));
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  expect_invalid(Tensor::from_list<int64_t>({1, 2}), "dtype i64");
  expect_invalid(Tensor::from_vector(std::vector<bool>{true}), "dtype bool");
  expect_invalid(Tensor::empty(f16, {2}), "dtype f16");
  expect_invalid(Tensor::scalar(1.0f), "not rank 0");
  expect_invalid(Tensor::empty(u8, Shape(9, 1)), "not rank 9");
  expect_invalid(Tensor(), "undefined");
  Graph g;
  expect_invalid(g.placeholder(f32, {2}, "x"), "symbolic");
  EXPECT_FALSE(std::filesystem::exists(path("bad.idx")));
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

TEST_F(IdxTest, WriteIntoMissingDirectoryIsNotFound) {
  try {
    write_idx(path("no/such/dir/x.idx"), Tensor::from_list<uint8_t>({1}), false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr(path("no/such/dir/x.idx")));
  }
}

TEST_F(IdxTest, MissingFileIsNotFoundAndNamesThePath) {
  Error missing = test_values::thrown_error([&] { read_idx(path("missing.idx")); });
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.what(), HasSubstr(path("missing.idx")));
  EXPECT_THAT(missing.what(), HasSubstr("No such file"));

  Error dir = test_values::thrown_error([&] { read_idx(dir_); });
  EXPECT_EQ(dir.code(), ErrorCode::kNotFound);
  EXPECT_THAT(dir.what(), HasSubstr("is a directory, not a file"));
}

TEST_F(IdxTest, TruncatedHeaderIsDataLoss) {
  Error empty = read_error("empty.idx", {});
  EXPECT_EQ(empty.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(empty.what(), HasSubstr(path("empty.idx")));
  EXPECT_THAT(empty.what(), HasSubstr("truncated header"));
  EXPECT_THAT(empty.what(), HasSubstr("at offset 0"));

  Error short_magic = read_error("short.idx", {0, 0, 8});
  EXPECT_THAT(short_magic.what(), HasSubstr("the file ends after 3 bytes"));

  Error short_dims = read_error("dims.idx", {0, 0, 8, 3, 0, 0, 0, 1, 0, 0});
  EXPECT_EQ(short_dims.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(short_dims.what(), HasSubstr("expected 3 dimensions (12 bytes) at offset 4"));

  Error gz_dims = read_error("dims.gz", gzip_stored({0, 0, 8, 2, 0, 0, 0, 1}));
  EXPECT_THAT(gz_dims.what(), HasSubstr("expected 2 dimensions (8 bytes) at offset 4"));
  EXPECT_THAT(gz_dims.what(), HasSubstr("the decompressed stream ends after 8 bytes"));
}

TEST_F(IdxTest, BadMagicIsDataLoss) {
  Error nonzero = read_error("nonzero.idx", {1, 0, 8, 1, 0, 0, 0, 1, 5});
  EXPECT_EQ(nonzero.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(nonzero.what(), HasSubstr(path("nonzero.idx")));
  EXPECT_THAT(nonzero.what(), HasSubstr("bad magic number at offset 0"));
  EXPECT_THAT(read_error("half_gzip.idx", {0x1f, 0, 8, 1}).what(), HasSubstr("0x1f 0x00"));

  Error type = read_error("type.idx", {0, 0, 0x0a, 1, 0, 0, 0, 1, 5});
  EXPECT_EQ(type.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(type.what(), HasSubstr("unknown IDX type code 0x0a at offset 2"));

  Error rank0 = read_error("rank0.idx", {0, 0, 8, 0, 5});
  EXPECT_EQ(rank0.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(rank0.what(), HasSubstr("rank 0 at offset 3"));
  EXPECT_THAT(read_error("rank9.idx", {0, 0, 8, 9}).what(), HasSubstr("rank 9 at offset 3"));
}

TEST_F(IdxTest, TruncatedDataNamesTheExpectedSizeAndOffset) {
  const Bytes bytes = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3};
  Error raw = read_error("short.idx", bytes);
  EXPECT_EQ(raw.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(raw.what(), HasSubstr(path("short.idx")));
  EXPECT_THAT(raw.what(), HasSubstr("expected 6 bytes of data at offset 12"));
  EXPECT_THAT(raw.what(), HasSubstr("[2,3] of u8"));
  EXPECT_THAT(raw.what(), HasSubstr("the file ends after 3 of them (at offset 15)"));

  Error gz = read_error("short.gz", gzip_stored(bytes));
  EXPECT_EQ(gz.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(gz.what(), HasSubstr("expected 6 bytes of data at offset 12"));
  EXPECT_THAT(gz.what(), HasSubstr("the decompressed stream ends after 3 of them"));

  // f64 claims 8 bytes per element.
  Error f64_short = read_error("f64.idx", {0, 0, 0x0e, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0});
  EXPECT_THAT(f64_short.what(), HasSubstr("expected 16 bytes of data at offset 8"));
}

TEST_F(IdxTest, TrailingBytesAreDataLoss) {
  const Bytes bytes = {0, 0, 8, 1, 0, 0, 0, 1, 7, 0xde, 0xad};
  Error raw = read_error("trail.idx", bytes);
  EXPECT_EQ(raw.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(raw.what(), HasSubstr("2 trailing bytes after the data, at offset 9"));

  Error gz = read_error("trail.gz", gzip_stored(bytes));
  EXPECT_EQ(gz.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(gz.what(),
              HasSubstr("trailing bytes after the data, at offset 9 of the decompressed"));

  // Garbage after a complete gzip stream, in the compressed file itself.
  const Bytes good = gzip_stored({0, 0, 8, 1, 0, 0, 0, 1, 7});
  Error after = read_error("after.gz", concat(good, {0xde, 0xad, 0xbe, 0xef}));
  EXPECT_EQ(after.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(after.what(), HasSubstr("trailing garbage after the end of the gzip stream"));
  EXPECT_THAT(after.what(), HasSubstr("compressed offset " + std::to_string(good.size())));
  EXPECT_THAT(read_error("one.gz", concat(good, {0})).what(), HasSubstr("trailing garbage"));
}

TEST_F(IdxTest, CorruptGzipIsDataLoss) {
  // A valid gzip header followed by a deflate block of the reserved type 3.
  Error garbage = read_error("garbage.gz", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
                                            0xff, 0x12, 0x34, 0x56, 0x78});
  EXPECT_EQ(garbage.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(garbage.what(), HasSubstr(path("garbage.gz")));
  EXPECT_THAT(garbage.what(), HasSubstr("corrupt gzip stream at compressed offset"));

  Bytes bad_crc = gzip_stored({0, 0, 8, 1, 0, 0, 0, 1, 7});
  bad_crc[bad_crc.size() - 8] ^= 1;
  Error crc = read_error("crc.gz", bad_crc);
  EXPECT_EQ(crc.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(crc.what(), HasSubstr("corrupt gzip stream"));

  Bytes full = gzip_stored({0, 0, 8, 1, 0, 0, 0, 4, 1, 2, 3, 4});
  for (size_t cut : {full.size() - 3, full.size() - 8, size_t{20}, size_t{12}, size_t{3}}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    Error truncated = read_error("cut.gz", Bytes(full.begin(), full.begin() + cut));
    EXPECT_EQ(truncated.code(), ErrorCode::kDataLoss);
    EXPECT_THAT(truncated.what(), HasSubstr(path("cut.gz")));
  }
  EXPECT_THAT(read_error("cut.gz", Bytes(full.begin(), full.end() - 3)).what(),
              HasSubstr("the gzip stream is truncated"));
}

TEST_F(IdxTest, AbsurdDimensionsFailWithoutAllocating) {
  struct rusage before;
  getrusage(RUSAGE_SELF, &before);
  const long rss_before_kb = before.ru_maxrss;
  // 0xffffffff x 0xffffffff elements: more than a tensor can count (2^63 - 1).
  const Bytes absurd = {0, 0, 8, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3};
  for (const Bytes& bytes : {absurd, gzip_stored(absurd)}) {
    Error e = read_error("absurd", bytes);
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_THAT(e.what(), HasSubstr("dimensions [4294967295,4294967295] at offset 4 claim "
                                    "18446744065119617025 elements"));
  }
  // Products that overflow 64 bits, in elements or in bytes.
  Error overflow =
      read_error("overflow.gz", gzip_stored({0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                             0xff, 0xff, 0xff, 0xff, 0xff, 1}));
  EXPECT_EQ(overflow.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(overflow.what(), HasSubstr("claim more than 2^64 elements"));
  Error f64_bytes =
      read_error("f64.idx", {0, 0, 0x0e, 2, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 1});
  EXPECT_THAT(f64_bytes.what(), HasSubstr("claim 4611686014132420609 elements"));

  // 0xffff^3 = 281 TB: a count a tensor could hold, checked against the data that exists.
  const Bytes huge = {0, 0, 8, 3, 0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff, 0, 0, 0xff, 0xff, 1, 2, 3};
  Error raw = read_error("huge.idx", huge);
  EXPECT_EQ(raw.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(raw.what(), HasSubstr("expected 281462092005375 bytes of data at offset 16"));
  EXPECT_THAT(raw.what(), HasSubstr("the file ends after 3 of them"));
  Error gz = read_error("huge.gz", gzip_stored(huge));
  EXPECT_EQ(gz.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(gz.what(), HasSubstr("expected 281462092005375 bytes of data at offset 16"));
  EXPECT_THAT(gz.what(), HasSubstr("the decompressed stream ends after 3 of them"));

  // 300 MB claimed (above what a gzip header is trusted with up front), 3 bytes present.
  Error big = read_error("big.gz", gzip_stored({0, 0, 8, 1, 0x11, 0xe1, 0xa3, 0x00, 1, 2, 3}));
  EXPECT_THAT(big.what(), HasSubstr("expected 300000000 bytes of data at offset 8"));

  // Rejecting absurd headers must not have touched anything near the claimed sizes.
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  EXPECT_LT(usage.ru_maxrss - rss_before_kb, 64 * 1024) << "peak memory grew (KiB)";
}

TEST_F(IdxTest, LargeGzipFileGrowsItsBufferAsDataArrives) {
  // 257 MiB of data: more than the size a gzip header is trusted with up front.
  const int64_t n = (int64_t{257} << 20);
  Tensor t = Tensor::empty(u8, {n});
  auto d = t.mutable_data<uint8_t>();
  std::memset(d.data(), 0, d.size());
  d[0] = 1;
  d[n / 2] = 2;
  d[n - 1] = 3;
  write_idx(path("large.gz"), t, true);
  Tensor back = read_idx(path("large.gz"));
  ASSERT_EQ(back.shape(), (Shape{n}));
  auto b = back.data<uint8_t>();
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[n / 2], 2);
  EXPECT_EQ(b[n - 1], 3);
  EXPECT_EQ(std::memcmp(b.data(), d.data(), d.size()), 0);
}

}  // namespace
}  // namespace kiln::data

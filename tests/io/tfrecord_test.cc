// TFRecord files: exact framing bytes built by hand, round trips (plain, gzip, zlib), hand-built
// compressed inputs, atomic writes, and every kind of corruption reported with file and offset.
#include "kiln/io/tfrecord.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::io {
namespace {

using test_values::thrown_error;

namespace fs = std::filesystem;
using testing::HasSubstr;

// ---- independent references: CRCs bit by bit, framing and compressed streams by hand ----

uint32_t ref_crc32c(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t ref_mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  return out;
}

// A record: length (LE u64), masked CRC of the length, data, masked CRC of the data.
std::string frame(const std::string& data) {
  const std::string length = le(data.size(), 8);
  return length + le(ref_mask(ref_crc32c(length)), 4) + data + le(ref_mask(ref_crc32c(data)), 4);
}
// Just a header claiming `length`, with a correct length CRC.
std::string header(uint64_t length) {
  const std::string l = le(length, 8);
  return l + le(ref_mask(ref_crc32c(l)), 4);
}

uint32_t crc32_ieee(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t adler32(const std::string& s) {
  uint32_t a = 1, b = 0;
  for (unsigned char x : s) {
    a = (a + x) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}
// Deflate "stored" blocks (RFC 1951), so compressed inputs do not come from zlib itself.
std::string stored_blocks(const std::string& data) {
  std::string out;
  size_t pos = 0;
  do {
    const size_t len = std::min<size_t>(data.size() - pos, 65535);
    out.push_back(pos + len == data.size() ? 1 : 0);
    out += le(len, 2) + le(~len & 0xffff, 2) + data.substr(pos, len);
    pos += len;
  } while (pos < data.size());
  return out;
}
std::string gzip_stored(const std::string& data) {
  return std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", 10) + stored_blocks(data) +
         le(crc32_ieee(data), 4) + le(data.size(), 4);
}
std::string zlib_stored(const std::string& data) {
  const uint32_t a = adler32(data);
  std::string trailer = {static_cast<char>(a >> 24), static_cast<char>(a >> 16),
                         static_cast<char>(a >> 8), static_cast<char>(a)};
  return std::string("\x78\x01", 2) + stored_blocks(data) + trailer;
}

class TFRecord : public testing_util::TempDirTest {};

std::string pseudo_random(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (char& c : s) {
    seed = seed * 1664525u + 1013904223u;
    c = static_cast<char>(seed >> 24);
  }
  return s;
}

// Every record of a file through RecordReader::next_into, each into storage of its own.
std::vector<std::string> records_via_next_into(const std::string& path,
                                               RecordReaderOptions options = {}) {
  RecordReader reader(path, options);
  std::vector<std::string> records;
  for (;;) {
    std::unique_ptr<uint8_t[]> storage;
    size_t size = 0;
    if (!reader.next_into([&](size_t n) {
          storage = std::make_unique<uint8_t[]>(n + 1);  // never null, even for n = 0
          size = n;
          return storage.get();
        })) {
      return records;
    }
    records.emplace_back(reinterpret_cast<const char*>(storage.get()), size);
  }
}

// ---- exact bytes ----

TEST_F(TFRecord, WriterProducesTheExactFramingBytes) {
  const std::string p = path("known.tfrecord");
  RecordWriter writer(p);
  writer.write("hello");
  writer.write("");
  writer.close();
  // "hello": length 05 00.., masked length CRC 0x3e04b2ea, data, masked data CRC 0x191c1fbb
  // (values from an independent implementation); then the empty record.
  const std::string hello =
      std::string("\x05\0\0\0\0\0\0\0", 8) + "\xea\xb2\x04\x3e" + "hello" + "\xbb\x1f\x1c\x19";
  EXPECT_EQ(frame("hello"), hello);
  EXPECT_EQ(read_file(p), hello + frame(""));
}

TEST_F(TFRecord, ReaderReadsHandBuiltRecords) {
  const std::string p = write_file("hand.tfrecord", frame("abc") + frame("") + frame("xyz!"));
  RecordReader reader(p);
  std::string r;
  ASSERT_TRUE(reader.next(r));
  EXPECT_EQ(r, "abc");
  EXPECT_EQ(reader.offset(), 12u + 3 + 4);
  ASSERT_TRUE(reader.next(r));
  EXPECT_EQ(r, "");
  EXPECT_EQ(reader.next(), std::optional<std::string>("xyz!"));
  EXPECT_FALSE(reader.next(r));
  EXPECT_FALSE(reader.next(r));  // stays at the end
  EXPECT_EQ(reader.corrupt_records(), 0);
}

TEST_F(TFRecord, EmptyFileHasNoRecords) {
  EXPECT_TRUE(read_records(write_file("empty", "")).empty());
}

TEST_F(TFRecord, ReaderIteratesWithRangeFor) {
  const std::string p = write_file("iter.tfrecord", frame("a") + frame("bb") + frame("ccc"));
  RecordReader reader(p);
  std::vector<std::string> got;
  for (const std::string& r : reader) got.push_back(r);
  EXPECT_EQ(got, (std::vector<std::string>{"a", "bb", "ccc"}));
}

TEST_F(TFRecord, ReadsHandBuiltGzipAndZlibStreams) {
  const std::string records = frame("first") + frame("") + frame(pseudo_random(70000, 3));
  for (auto [compression, bytes] : {std::pair{Compression::kGzip, gzip_stored(records)},
                                    std::pair{Compression::kZlib, zlib_stored(records)}}) {
    const std::string p = write_file("hand.z", bytes);
    auto got = read_records(p, {.compression = compression});
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0], "first");
    EXPECT_EQ(got[1], "");
    EXPECT_EQ(got[2], pseudo_random(70000, 3));
  }
  // Two gzip members back to back read as one stream.
  const std::string p = write_file("two.gz", gzip_stored(frame("a")) + gzip_stored(frame("b")));
  EXPECT_EQ(read_records(p, {.compression = Compression::kGzip}),
            (std::vector<std::string>{"a", "b"}));
}

// ---- round trips ----

class TFRecordRoundTrip : public TFRecord, public testing::WithParamInterface<Compression> {};

TEST_P(TFRecordRoundTrip, RecordsComeBackUnchanged) {
  const std::vector<std::string> records = {
      "", "x", std::string("\0\1\2\0", 4), pseudo_random(1 << 20, 7), "", pseudo_random(100, 9)};
  const std::string p = path("round.tfrecord");
  {
    RecordWriter writer(p, GetParam());
    for (const std::string& r : records) writer.write(r);
    writer.close();
  }
  EXPECT_EQ(read_records(p, {.compression = GetParam()}), records);
  EXPECT_EQ(records_via_next_into(p, {.compression = GetParam()}), records);
  const std::string bytes = read_file(p);
  switch (GetParam()) {
    case Compression::kNone: {
      std::string expected;
      for (const std::string& r : records) expected += frame(r);
      EXPECT_EQ(bytes, expected);
      break;
    }
    case Compression::kGzip:
      ASSERT_GE(bytes.size(), 3u);
      EXPECT_EQ(bytes.substr(0, 3), std::string("\x1f\x8b\x08", 3));  // gzip magic, deflate
      break;
    case Compression::kZlib:
      ASSERT_GE(bytes.size(), 2u);
      EXPECT_EQ(bytes[0], '\x78');  // deflate, 32K window
      EXPECT_EQ((static_cast<uint8_t>(bytes[0]) * 256 + static_cast<uint8_t>(bytes[1])) % 31, 0);
      break;
  }
}

TEST_P(TFRecordRoundTrip, NoRecordsMakesAReadableFile) {
  const std::string p = path("none.tfrecord");
  RecordWriter(p, GetParam()).close();
  EXPECT_TRUE(fs::exists(p));
  EXPECT_TRUE(read_records(p, {.compression = GetParam()}).empty());
}

INSTANTIATE_TEST_SUITE_P(Compressions, TFRecordRoundTrip,
                         testing::Values(Compression::kNone, Compression::kGzip,
                                         Compression::kZlib),
                         [](const auto& info) {
                           return std::string(info.param == Compression::kNone   ? "None"
                                              : info.param == Compression::kGzip ? "Gzip"
                                                                                 : "Zlib");
                         });

// ---- atomic writes ----

TEST_F(TFRecord, FileAppearsOnlyOnClose) {
  const std::string p = path("atomic.tfrecord");
  RecordWriter writer(p);
  writer.write(pseudo_random(200000, 1));
  EXPECT_FALSE(fs::exists(p));
  int temps = 0;
  for (const std::string& f : files()) temps += f.starts_with("atomic.tfrecord.tmp-");
  EXPECT_EQ(temps, 1);  // the temporary file is in the same directory
  writer.close();
  EXPECT_TRUE(fs::exists(p));
  EXPECT_EQ(files().size(), 1u);
}

TEST_F(TFRecord, OverwriteKeepsTheOldFileUntilClose) {
  const std::string p = write_file("old.tfrecord", frame("old"));
  RecordWriter writer(p);
  writer.write("new");
  EXPECT_EQ(read_records(p), std::vector<std::string>{"old"});
  writer.close();
  EXPECT_EQ(read_records(p), std::vector<std::string>{"new"});
}

TEST_F(TFRecord, DestructorClosesButAnExceptionDiscards) {
  const std::string kept = path("kept.tfrecord");
  { RecordWriter(kept).write("kept"); }
  EXPECT_EQ(read_records(kept), std::vector<std::string>{"kept"});

  const std::string dropped = path("dropped.tfrecord");
  try {
    RecordWriter writer(dropped);
    writer.write("partial");
    throw std::runtime_error("failure while producing records");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(dropped));
  EXPECT_EQ(files().size(), 1u);
}

TEST_F(TFRecord, MoveAssignmentClosesTheOverwrittenWriter) {
  RecordWriter a(path("a.tfrecord"));
  a.write("from a");
  RecordWriter b(path("b.tfrecord"));
  b.write("from b");
  a = std::move(b);  // a's file is complete: it appears
  EXPECT_EQ(read_records(path("a.tfrecord")), std::vector<std::string>{"from a"});
  a.write("more b");
  a.close();
  EXPECT_EQ(read_records(path("b.tfrecord")), (std::vector<std::string>{"from b", "more b"}));
}

TEST_F(TFRecord, WriterIntoMissingDirectoryIsNotFound) {
  Error e = thrown_error([&] { RecordWriter w(path("no/such/dir/x.tfrecord")); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(), HasSubstr("no/such/dir/x.tfrecord"));
}

// ---- corruption ----

TEST_F(TFRecord, MissingFileIsNotFound) {
  Error e = thrown_error([&] { RecordReader r(path("missing.tfrecord")); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(), HasSubstr("missing.tfrecord"));
}

TEST_F(TFRecord, TruncatedLengthIsDataLossAtItsOffset) {
  const std::string first = frame("ok");
  const std::string p = write_file("cut.tfrecord", first + header(10).substr(0, 5));
  RecordReader reader(p);
  std::string r;
  ASSERT_TRUE(reader.next(r));
  Error e = thrown_error([&] { reader.next(r); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr(p));
  EXPECT_THAT(e.what(), HasSubstr("offset " + std::to_string(first.size())));
  EXPECT_THAT(e.what(), HasSubstr("truncated header"));
}

TEST_F(TFRecord, TruncatedDataIsDataLoss) {
  // The header claims 100 bytes; 50 follow.
  const std::string p = write_file("short.tfrecord", header(100) + std::string(50, 'x'));
  Error e = thrown_error([&] { read_records(p); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("offset 0"));
  EXPECT_THAT(e.what(), HasSubstr("claims 100 bytes"));
  EXPECT_THAT(e.what(), HasSubstr("only 50 bytes remain"));
  // All data present, but the data CRC cut short.
  const std::string full = frame("abcdef");
  const std::string p2 = write_file("nocrc.tfrecord", full.substr(0, full.size() - 2));
  Error e2 = thrown_error([&] { read_records(p2); });
  EXPECT_EQ(e2.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e2.what(), HasSubstr("truncated"));
}

TEST_F(TFRecord, FlippedBitInDataIsDataLossNamingTheRecordOffset) {
  const std::string first = frame("first record");
  std::string second = frame("second record");
  second[12 + 3] ^= 0x10;
  const std::string p = write_file("flip.tfrecord", first + second);
  Error e = thrown_error([&] { read_records(p); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr(p));
  EXPECT_THAT(e.what(), HasSubstr("record at offset " + std::to_string(first.size())));
  EXPECT_THAT(e.what(), HasSubstr("CRC"));
}

TEST_F(TFRecord, FlippedBitInLengthIsDataLoss) {
  std::string rec = frame("payload");
  rec[0] ^= 0x04;  // length 7 -> 3: the length CRC no longer matches
  const std::string p = write_file("len.tfrecord", rec);
  Error e = thrown_error([&] { read_records(p); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("offset 0"));
  EXPECT_THAT(e.what(), HasSubstr("corrupt length"));
}

TEST_F(TFRecord, FlippedBitInAStoredCrcIsDataLoss) {
  std::string rec = frame("payload");
  rec[rec.size() - 1] ^= 0x80;
  const std::string p = write_file("crc.tfrecord", rec);
  EXPECT_EQ(thrown_error([&] { read_records(p); }).code(), ErrorCode::kDataLoss);
}

int64_t max_rss_kb() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

TEST_F(TFRecord, AbsurdLengthFailsFastWithoutAllocating) {
  const uint64_t absurd = uint64_t{1} << 63;  // with a valid length CRC: the CRC cannot save us
  const std::string p = write_file("absurd.tfrecord", header(absurd) + "tiny");
  Error e = thrown_error([&] { read_records(p); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("claims 9223372036854775808 bytes"));

  const std::string gz = write_file("absurd.gz", gzip_stored(header(absurd) + "tiny"));
  Error eg = thrown_error([&] { read_records(gz, {.compression = Compression::kGzip}); });
  EXPECT_EQ(eg.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(eg.what(), HasSubstr("1 GiB"));
  EXPECT_THAT(eg.what(), HasSubstr("offset 0 of the decompressed data"));
}

TEST_F(TFRecord, CompressedLengthIsBelievedOnlyAsFarAsTheDataGoes) {
  // Just under the 1 GiB limit, but only 100 bytes follow: the buffer grows with the data.
  const std::string p =
      write_file("big.gz", gzip_stored(header((uint64_t{1} << 30) - 1) + std::string(100, 'a')));
  const int64_t before = max_rss_kb();
  Error e = thrown_error([&] { read_records(p, {.compression = Compression::kGzip}); });
  EXPECT_LT(max_rss_kb() - before, 256 * 1024);  // far less than the 1 GiB claimed
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("truncated"));
}

TEST_F(TFRecord, CorruptCompressedStreamIsDataLoss) {
  const std::string records = frame("alpha") + frame("beta");
  // Cut the gzip stream short.
  const std::string gz = gzip_stored(records);
  const std::string cut = write_file("cut.gz", gz.substr(0, gz.size() - 10));
  Error e = thrown_error([&] { read_records(cut, {.compression = Compression::kGzip}); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr(cut));
  // Damage the block header of the stored deflate block.
  std::string bad = gz;
  bad[10] = '\x07';  // BTYPE 11: reserved, invalid
  const std::string p = write_file("bad.gz", bad);
  Error e2 = thrown_error([&] { read_records(p, {.compression = Compression::kGzip}); });
  EXPECT_EQ(e2.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e2.what(), HasSubstr("corrupt gzip stream"));
  // A plain file read as gzip.
  const std::string plain = write_file("plain.tfrecord", records);
  Error e3 = thrown_error([&] { read_records(plain, {.compression = Compression::kGzip}); });
  EXPECT_EQ(e3.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e3.what(), HasSubstr("is the file really gzip-compressed?"));
  // Bytes after the last gzip member that do not start another one.
  const std::string trail = write_file("trail.gz", gz + "junk");
  Error e4 = thrown_error([&] { read_records(trail, {.compression = Compression::kGzip}); });
  EXPECT_EQ(e4.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e4.what(), HasSubstr("trailing garbage after the end of the gzip stream, at "
                                   "compressed offset " +
                                   std::to_string(gz.size())));
}

TEST_F(TFRecord, SkipCorruptSkipsBadDataAndCountsIt) {
  std::string r1 = frame("one"), r3 = frame("three");
  r1[13] ^= 1;
  r3[14] ^= 1;
  const std::string p =
      write_file("skip.tfrecord", frame("zero") + r1 + frame("two") + r3 + frame("four"));
  RecordReader reader(p, {.skip_corrupt = true});
  std::vector<std::string> got;
  for (const std::string& r : reader) got.push_back(r);
  EXPECT_EQ(got, (std::vector<std::string>{"zero", "two", "four"}));
  EXPECT_EQ(records_via_next_into(p, {.skip_corrupt = true}), got);
  EXPECT_EQ(reader.corrupt_records(), 2);
  EXPECT_THAT(reader.last_corruption(), HasSubstr("CRC"));
}

TEST_F(TFRecord, SkipCorruptStopsWhenTheFramingIsLost) {
  std::string r1 = frame("one"), r2 = frame("two");
  r1[13] ^= 1;  // data: skippable
  r2[2] ^= 1;   // length: no way to find the next record
  const std::string p =
      write_file("lost.tfrecord", frame("zero") + r1 + r2 + frame("three") + frame("four"));
  RecordReader reader(p, {.skip_corrupt = true});
  EXPECT_EQ(read_records(p, {.skip_corrupt = true}), (std::vector<std::string>{"zero"}));
  std::vector<std::string> got;
  for (const std::string& r : reader) got.push_back(r);
  EXPECT_EQ(got, std::vector<std::string>{"zero"});
  EXPECT_EQ(reader.corrupt_records(), 2);
  EXPECT_THAT(reader.last_corruption(), HasSubstr("corrupt length"));

  // A truncated tail counts as one corrupt record.
  const std::string t = write_file("tail.tfrecord", frame("a") + frame("b").substr(0, 9));
  RecordReader tail(t, {.skip_corrupt = true});
  std::vector<std::string> tail_got(tail.begin(), tail.end());
  EXPECT_EQ(tail_got, std::vector<std::string>{"a"});
  EXPECT_EQ(tail.corrupt_records(), 1);

  // A corrupt compressed stream ends the file, counted once.
  const std::string gz = gzip_stored(frame("a") + frame("b"));
  const std::string g = write_file("cut.gz", gz.substr(0, gz.size() - 12));
  RecordReader zr(g, {.compression = Compression::kGzip, .skip_corrupt = true});
  std::vector<std::string> zgot(zr.begin(), zr.end());
  EXPECT_EQ(zgot, std::vector<std::string>{"a"});
  EXPECT_EQ(zr.corrupt_records(), 1);
}

TEST_F(TFRecord, EveryTruncationAndAFlipInEachByteIsCaught) {
  const std::vector<std::string> records = {"alpha", "", "gamma ray"};
  for (Compression compression : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    const std::string p = path("whole.tfrecord");
    {
      RecordWriter writer(p, compression);
      for (const std::string& r : records) writer.write(r);
    }
    const std::string bytes = read_file(p);
    const RecordReaderOptions strict = {.compression = compression};
    const RecordReaderOptions lenient = {.compression = compression, .skip_corrupt = true};
    auto check = [&](const std::string& damaged, const std::string& what) {
      const std::string q = write_file("damaged.tfrecord", damaged);
      try {
        // Succeeding is possible only if the damage removed whole records at the end.
        const auto got = read_records(q, strict);
        ASSERT_LE(got.size(), records.size()) << what;
        EXPECT_TRUE(std::equal(got.begin(), got.end(), records.begin())) << what;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << what << ": " << e.what();
        EXPECT_THAT(e.what(), HasSubstr(q)) << what;
      }
      // Reading into storage of the caller's gives the same records or the same error.
      std::optional<std::vector<std::string>> copied, direct;
      std::string copied_error, direct_error;
      try {
        copied = read_records(q, strict);
      } catch (const Error& e) {
        copied_error = e.what();
      }
      try {
        direct = records_via_next_into(q, strict);
      } catch (const Error& e) {
        direct_error = e.what();
      }
      EXPECT_EQ(direct, copied) << what;
      EXPECT_EQ(direct_error, copied_error) << what;
      RecordReader reader(q, lenient);  // never throws with skip_corrupt
      std::vector<std::string> got(reader.begin(), reader.end());
      EXPECT_LE(got.size(), records.size()) << what;
      EXPECT_EQ(records_via_next_into(q, lenient), got) << what;
    };
    for (size_t n = 0; n < bytes.size(); ++n)
      check(bytes.substr(0, n), "cut at " + std::to_string(n));
    for (size_t i = 0; i < bytes.size(); ++i) {  // one bit of each byte, in turn
      std::string damaged = bytes;
      damaged[i] ^= static_cast<char>(1 << (i % 8));
      check(damaged, "bit " + std::to_string(i % 8) + " of byte " + std::to_string(i));
    }
    // Without compression every flipped bit breaks a CRC: never silently accepted.
    if (compression == Compression::kNone) {
      std::string damaged = bytes;
      damaged[bytes.size() / 2] ^= 0x01;
      const std::string q = write_file("flip.tfrecord", damaged);
      EXPECT_THROW(read_records(q, strict), Error);
    }
  }
}

}  // namespace
}  // namespace kiln::io

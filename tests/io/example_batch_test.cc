// parse_example over a batch of records: one call on many records equals one call per record
// (random records, fixed and variable-length features, canonical and non-canonical wire forms),
// records given as strings, string views or a ragged tensor (values, row_splits), errors naming
// the record's index in the batch and the feature, and empty batches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io/example.h"
#include "kiln/kiln.h"
#include "tests/io/wire_format.h"
#include "tests/testing/values.h"

namespace kiln::io {
namespace {

using testing::HasSubstr;

// ---- protobuf wire format by hand (tests/io/wire_format.h) ----

using namespace wire;

std::string entry(const std::string& key, const std::string& feature) {
  return len_field(1, len_field(1, key) + len_field(2, feature));
}
// Example {features {entries}}.
std::string example_of(const std::string& entries) { return len_field(1, entries); }

template <class T>
std::vector<T> values_of(const Tensor& t) {
  auto d = t.data<T>();
  return {d.begin(), d.end()};
}

// One generated record and what it holds.
struct Record {
  std::string bytes;
  std::string img;    // 6 bytes
  int64_t label = 0;  // missing when label_missing (default -1)
  bool label_missing = false;
  std::vector<float> w;        // 2 values
  std::vector<int64_t> tok;    // var-len
  std::vector<std::string> s;  // var-len bytes: concatenated
  std::vector<float> f;        // var-len, absent when empty and f_absent
  bool f_absent = false;
};

// Not a static: a Tensor destroyed at exit would be freed after the thread's allocator cache.
std::vector<FeatureSpec> spec() {
  return {
      FixedLen{"img", u8, {2, 3}},
      FixedLen{"label", i64, {}, Tensor::scalar<int64_t>(-1)},
      FixedLen{"w", f32, {2}},
      VarLen{"tok", i64},
      VarLen{"s", u8},
      VarLen{"f", f32},
  };
}

// A random record. Half of them are written by Example::serialize (protobuf's canonical form),
// the others by hand in forms protobuf also accepts: unpacked lists, lists split in two, the
// features message split in two, unknown fields, keys repeated (the last one wins).
Record random_record(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Record r;
  for (int i = 0; i < 6; ++i) r.img.push_back(static_cast<char>(pick(256)));
  r.label_missing = pick(4) == 0;
  r.label = r.label_missing ? -1 : static_cast<int64_t>(rng()) - (int64_t{1} << 31) * pick(3);
  r.w = {static_cast<float>(pick(1000)) / 8, -static_cast<float>(pick(1000))};
  for (int i = pick(5); i > 0; --i)
    r.tok.push_back(static_cast<int64_t>(rng()) * (pick(2) ? 1 : -99991));
  for (int i = pick(4); i > 0; --i)
    r.s.push_back(std::string(static_cast<size_t>(pick(4)), 'a' + pick(26)));
  for (int i = pick(4); i > 0; --i) r.f.push_back(static_cast<float>(pick(100)) - 50.5f);
  r.f_absent = r.f.empty() && pick(2);

  if (pick(2)) {
    Example ex;
    ex.set_bytes("img", {r.img.substr(0, 2), r.img.substr(2)}).set_floats("w", r.w);
    if (!r.label_missing) ex.set_int64s("label", {r.label});
    ex.set_int64s("tok", r.tok).set_bytes("s", r.s).set_bytes("other", {"zz"});
    if (!r.f_absent) ex.set_floats("f", r.f);
    r.bytes = ex.serialize();
    return r;
  }
  // By hand, features in a random order, some in non-canonical forms.
  std::vector<std::string> entries;
  entries.push_back(
      entry("img", len_field(1, len_field(1, r.img.substr(0, 1)) + len_field(1, r.img.substr(1)))));
  if (!r.label_missing) {
    // Unpacked: the value field with wire type 0.
    entries.push_back(
        entry("label", len_field(3, tag(1, 0) + varint(static_cast<uint64_t>(r.label)))));
  }
  // Unpacked floats: wire type 5, one field per value.
  entries.push_back(
      entry("w", len_field(2, tag(1, 5) + fixed32(r.w[0]) + tag(1, 5) + fixed32(r.w[1]))));
  // A packed list split in two runs.
  const size_t half = r.tok.size() / 2;
  std::vector<int64_t> first(r.tok.begin(), r.tok.begin() + half),
      second(r.tok.begin() + half, r.tok.end());
  entries.push_back(entry(
      "tok", len_field(3, len_field(1, packed_ints(first)) + len_field(1, packed_ints(second)))));
  std::string s_list;
  for (const std::string& v : r.s) s_list += len_field(1, v);
  entries.push_back(entry("s", len_field(1, s_list)));
  if (!r.f_absent) entries.push_back(entry("f", len_field(2, len_field(1, packed_floats(r.f)))));
  std::shuffle(entries.begin(), entries.end(), rng);
  // A stale value of "w" before the real one: the last entry of a key wins.
  entries.insert(entries.begin(), entry("w", len_field(3, len_field(1, packed_ints({1, 2, 3})))));
  std::string all;
  for (const std::string& e : entries) all += e;
  // The features message split in two (protobuf merges them), and an unknown field.
  const size_t cut = entries[0].size() + entries[1].size();
  r.bytes =
      example_of(all.substr(0, cut)) + tag(7, 0) + varint(12345) + example_of(all.substr(cut));
  return r;
}

// What parse_example must return for `records`, built from what the generator put in.
void expect_parsed(const std::map<std::string, Tensor>& out, const std::vector<Record>& records) {
  const int64_t n = static_cast<int64_t>(records.size());
  ASSERT_EQ(out.size(), 9u);
  std::vector<uint8_t> img;
  std::vector<int64_t> label;
  std::vector<float> w;
  size_t max_tok = 0, max_s = 0, max_f = 0;
  for (const Record& r : records) {
    img.insert(img.end(), r.img.begin(), r.img.end());
    label.push_back(r.label);
    w.insert(w.end(), r.w.begin(), r.w.end());
    max_tok = std::max(max_tok, r.tok.size());
    size_t s_len = 0;
    for (const std::string& v : r.s) s_len += v.size();
    max_s = std::max(max_s, s_len);
    max_f = std::max(max_f, r.f.size());
  }
  EXPECT_EQ(out.at("img").shape(), (Shape{n, 2, 3}));
  EXPECT_EQ(values_of<uint8_t>(out.at("img")), img);
  EXPECT_EQ(values_of<int64_t>(out.at("label")), label);
  EXPECT_EQ(out.at("w").shape(), (Shape{n, 2}));
  EXPECT_EQ(values_of<float>(out.at("w")), w);
  std::vector<int64_t> tok(n * max_tok, 0), tok_len;
  std::vector<uint8_t> s(n * max_s, 0);
  std::vector<int64_t> s_len;
  std::vector<float> f(n * max_f, 0);
  std::vector<int64_t> f_len;
  for (int64_t i = 0; i < n; ++i) {
    const Record& r = records[i];
    std::copy(r.tok.begin(), r.tok.end(), tok.begin() + i * max_tok);
    tok_len.push_back(static_cast<int64_t>(r.tok.size()));
    std::string joined;
    for (const std::string& v : r.s) joined += v;
    std::copy(joined.begin(), joined.end(), s.begin() + i * max_s);
    s_len.push_back(static_cast<int64_t>(joined.size()));
    std::copy(r.f.begin(), r.f.end(), f.begin() + i * max_f);
    f_len.push_back(static_cast<int64_t>(r.f.size()));
  }
  EXPECT_EQ(out.at("tok").shape(), (Shape{n, static_cast<int64_t>(max_tok)}));
  EXPECT_EQ(values_of<int64_t>(out.at("tok")), tok);
  EXPECT_EQ(values_of<int64_t>(out.at("tok/lengths")), tok_len);
  EXPECT_EQ(out.at("s").shape(), (Shape{n, static_cast<int64_t>(max_s)}));
  EXPECT_EQ(values_of<uint8_t>(out.at("s")), s);
  EXPECT_EQ(values_of<int64_t>(out.at("s/lengths")), s_len);
  EXPECT_EQ(out.at("f").shape(), (Shape{n, static_cast<int64_t>(max_f)}));
  EXPECT_EQ(values_of<float>(out.at("f")), f);
  EXPECT_EQ(values_of<int64_t>(out.at("f/lengths")), f_len);
}

// The records as a ragged tensor: values u8 [total], row_splits i64 [n + 1].
std::pair<Tensor, Tensor> ragged(const std::vector<std::string>& records) {
  std::string all;
  std::vector<int64_t> splits = {0};
  for (const std::string& r : records) {
    all += r;
    splits.push_back(static_cast<int64_t>(all.size()));
  }
  return {Tensor::from_bytes(u8, {static_cast<int64_t>(all.size())}, all.data(), all.size()),
          Tensor::from_vector(splits, {static_cast<int64_t>(splits.size())})};
}

TEST(ParseExampleBatch, RandomRecordsBatchedEqualPerRecordAndWhatWasWritten) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    const size_t n = 1 + rng() % 40;
    std::vector<Record> records;
    std::vector<std::string> bytes;
    for (size_t i = 0; i < n; ++i) {
      records.push_back(random_record(rng));
      bytes.push_back(records.back().bytes);
    }
    SCOPED_TRACE("round " + std::to_string(round));
    // One call for the batch, from strings, string views and a ragged tensor.
    expect_parsed(parse_example(bytes, spec()), records);
    const std::vector<std::string_view> views(bytes.begin(), bytes.end());
    expect_parsed(parse_example(std::span<const std::string_view>(views), spec()), records);
    auto [values, splits] = ragged(bytes);
    expect_parsed(parse_example(values, splits, spec()), records);
    // One call per record gives the same rows.
    for (size_t i = 0; i < n; ++i) {
      expect_parsed(parse_example(std::span<const std::string>(&bytes[i], 1), spec()),
                    {records[i]});
    }
  }
}

TEST(ParseExampleBatch, EmptyBatches) {
  auto check = [](const std::map<std::string, Tensor>& out) {
    EXPECT_EQ(out.at("img").shape(), (Shape{0, 2, 3}));
    EXPECT_EQ(out.at("label").shape(), (Shape{0}));
    EXPECT_EQ(out.at("tok").shape(), (Shape{0, 0}));
    EXPECT_EQ(out.at("tok/lengths").shape(), (Shape{0}));
    EXPECT_EQ(out.at("s").dtype(), u8);
  };
  check(parse_example(std::vector<std::string>{}, spec()));
  check(parse_example(Tensor::empty(u8, {0}), Tensor::from_list<int64_t>({0}), spec()));
}

TEST(ParseExampleBatch, EmptyRecordsInARaggedBatch) {
  // An empty record is an Example without features: only defaults and empty var-len rows.
  auto [values, splits] =
      ragged({"", example_of(entry("label", len_field(3, len_field(1, packed_ints({4}))))), ""});
  auto out = parse_example(
      values, splits, {FixedLen{"label", i64, {}, Tensor::scalar<int64_t>(9)}, VarLen{"v", f32}});
  EXPECT_EQ(values_of<int64_t>(out.at("label")), (std::vector<int64_t>{9, 4, 9}));
  EXPECT_EQ(out.at("v").shape(), (Shape{3, 0}));
  EXPECT_EQ(values_of<int64_t>(out.at("v/lengths")), (std::vector<int64_t>{0, 0, 0}));
}

TEST(ParseExampleBatch, ErrorsNameTheRecordInTheBatchAndTheFeature) {
  std::vector<std::string> batch;
  for (int i = 0; i < 5; ++i) {
    batch.push_back(Example().set_bytes("img", {"abcdef"}).set_int64s("label", {i}).serialize());
  }
  const std::vector<FeatureSpec> s = {FixedLen{"img", u8, {6}}, FixedLen{"label", i64, {}}};

  // Truncated inside feature 'label' of record 3: data loss, naming the record and feature.
  std::vector<std::string> truncated = batch;
  truncated[3].resize(truncated[3].size() - 1);
  const auto truncated_batch = ragged(truncated);
  Error loss = test_values::thrown_error(
      [&] { parse_example(truncated_batch.first, truncated_batch.second, s); });
  EXPECT_EQ(loss.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(loss.what(), HasSubstr("example 3 ("));
  EXPECT_THAT(loss.what(), HasSubstr("not a valid serialized tf.Example"));
  EXPECT_THAT(loss.what(), HasSubstr("in feature 'label'"));

  // A float_list where the spec reads int64s, in record 2.
  std::vector<std::string> wrong = batch;
  wrong[2] = Example().set_bytes("img", {"abcdef"}).set_floats("label", {1.5f}).serialize();
  const auto wrong_batch = ragged(wrong);
  Error type =
      test_values::thrown_error([&] { parse_example(wrong_batch.first, wrong_batch.second, s); });
  EXPECT_EQ(type.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(type.what(), HasSubstr("feature 'label' in example 2 is a float_list"));

  // Five bytes where the shape needs six, in record 4.
  std::vector<std::string> short_img = batch;
  short_img[4] = Example().set_bytes("img", {"abcde"}).set_int64s("label", {4}).serialize();
  Error count = test_values::thrown_error([&] { parse_example(short_img, s); });
  EXPECT_THAT(count.what(), HasSubstr("feature 'img' in example 4 has 5 bytes"));

  // A required feature missing from record 1.
  std::vector<std::string> missing = batch;
  missing[1] = Example().set_bytes("img", {"abcdef"}).serialize();
  Error required = test_values::thrown_error([&] { parse_example(missing, s); });
  EXPECT_THAT(required.what(), HasSubstr("required feature 'label' in example 1 is missing"));
}

TEST(ParseExampleBatch, BadRaggedTensorsAreRefused) {
  const std::vector<FeatureSpec> s = {VarLen{"x", f32}};
  const Tensor values = Tensor::from_list<uint8_t>({1, 2, 3});
  Error end = test_values::thrown_error([&] {
    parse_example(values, Tensor::from_list<int64_t>({0, 2}), s);
  });
  EXPECT_EQ(end.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(end.what(), HasSubstr("end at the size of values (3)"));
  Error down = test_values::thrown_error([&] {
    parse_example(values, Tensor::from_list<int64_t>({0, 2, 1, 3}), s);
  });
  EXPECT_THAT(down.what(), HasSubstr("decrease at record 1"));
  Error dtype = test_values::thrown_error([&] {
    parse_example(values, Tensor::from_list<int32_t>({0, 3}), s);
  });
  EXPECT_THAT(dtype.what(), HasSubstr("row_splits must be i64 [batch + 1], not i32[2]"));
  Error none =
      test_values::thrown_error([&] { parse_example(values, Tensor::empty(i64, {0}), s); });
  EXPECT_THAT(none.what(), HasSubstr("row_splits must be i64 [batch + 1]"));
  Error vals = test_values::thrown_error([&] {
    parse_example(Tensor::from_list<float>({1}), Tensor::from_list<int64_t>({0, 1}), s);
  });
  EXPECT_THAT(vals.what(), HasSubstr("values must be u8 of rank 1, not f32[1]"));
}

TEST(ParseExampleBatch, DamagedRecordsInABatchNeverCrash) {
  // Every truncation and every bit flip of record 1 of 3: either parsed or a clear error
  // naming example 1 (records 0 and 2 are good).
  const std::string good = Example()
                               .set_bytes("img", {"abcdef"})
                               .set_int64s("tok", {5, -300})
                               .set_floats("w", {1, 2})
                               .serialize();
  const std::vector<FeatureSpec> s = {FixedLen{"img", u8, {6}}, VarLen{"tok", i64},
                                      FixedLen{"w", f32, {2}, Tensor::scalar<float>(0)}};
  auto check = [&](const std::string& damaged) {
    auto [values, splits] = ragged({good, damaged, good});
    try {
      auto out = parse_example(values, splits, s);
      EXPECT_EQ(out.at("img").shape(), (Shape{3, 6}));
      EXPECT_EQ(values_of<int64_t>(out.at("tok")).size(),
                3 * static_cast<size_t>(out.at("tok").dim(1)));
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("example 1")) << e.what();
    }
  };
  for_each_damaged(good, check);
}

// Tags and lengths written with padding (a varint of more bytes than needed): protobuf reads up
// to 5 bytes for those; parse_example must accept and refuse exactly what it does.
TEST(ParseExampleBatch, PaddedVarintsAgreeWithProtobuf) {
  const std::string feature = len_field(3, len_field(1, packed_ints({7})));
  const std::string entry_body = len_field(1, "a") + len_field(2, feature);
  auto padded = [](uint64_t v, int bytes) {  // v in exactly `bytes` varint bytes
    std::string out;
    for (int i = 0; i < bytes; ++i, v >>= 7) {
      out.push_back(static_cast<char>((v & 0x7f) | (i + 1 < bytes ? 0x80 : 0)));
    }
    return out;
  };
  for (int bytes = 1; bytes <= 7; ++bytes) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    for (const std::string& record :
         {example_of(padded(1 << 3 | 2, bytes) + varint(entry_body.size()) + entry_body),
          example_of(tag(1, 2) + padded(entry_body.size(), bytes) + entry_body)}) {
      bool protobuf_reads = true;
      try {
        Example::parse(record);
      } catch (const Error&) {
        protobuf_reads = false;
      }
      try {
        auto out = parse_example(std::vector<std::string>{record}, {FixedLen{"a", i64, {}}});
        EXPECT_TRUE(protobuf_reads);
        EXPECT_EQ(values_of<int64_t>(out.at("a")), std::vector<int64_t>{7});
      } catch (const Error& e) {
        EXPECT_FALSE(protobuf_reads) << e.what();
        EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
      }
    }
  }
}

// The strict reader and protobuf agree: random records, randomly damaged (bytes flipped,
// inserted, removed), parse as protobuf reads them (Example::parse, which uses protobuf), or
// fail as it does.
TEST(ParseExampleBatch, AgreesWithProtobufOnDamagedRecords) {
  const std::vector<std::pair<std::string, DType>> features = {
      {"img", u8}, {"label", i64}, {"w", f32}, {"tok", i64}, {"s", u8}, {"f", f32}};
  std::vector<FeatureSpec> var_spec;
  for (const auto& [name, dtype] : features) var_spec.push_back(VarLen{name, dtype});
  std::mt19937 rng(11);
  int parsed = 0, refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = random_record(rng).bytes;
    for (int edits = static_cast<int>(rng() % 3); edits >= 0 && !bytes.empty(); --edits) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes.insert(at, 1, static_cast<char>(rng()));
          break;
        default:
          bytes.erase(at, 1);
      }
    }
    SCOPED_TRACE("round " + std::to_string(round));
    std::optional<Example> reference;
    try {
      reference = Example::parse(bytes);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    }
    std::map<std::string, Tensor> out;
    try {
      out = parse_example(std::vector<std::string>{bytes}, var_spec);
    } catch (const Error& e) {
      if (!reference) {
        EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
        EXPECT_THAT(e.what(), HasSubstr("example 0"));
        ++refused;
        continue;
      }
      // Protobuf read it: the only error left is a feature of the wrong type.
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(", but its spec"));
      continue;
    }
    ASSERT_TRUE(reference.has_value()) << "parse_example accepted bytes protobuf refuses";
    ++parsed;
    for (const auto& [name, dtype] : features) {
      const Tensor& values = out.at(name);
      const int64_t n = out.at(name + "/lengths").item<int64_t>();
      auto it = reference->features().find(name);
      if (it == reference->features().end()) {
        EXPECT_EQ(n, 0) << name;
        continue;
      }
      if (dtype == u8) {
        std::string joined;
        for (const std::string& v : std::get<BytesList>(it->second)) joined += v;
        const auto got = values_of<uint8_t>(values);
        EXPECT_EQ(std::string(got.begin(), got.begin() + n), joined) << name;
      } else if (dtype == i64) {
        const auto got = values_of<int64_t>(values);
        EXPECT_EQ(std::vector<int64_t>(got.begin(), got.begin() + n),
                  std::get<Int64List>(it->second))
            << name;
      } else {
        const auto got = values_of<float>(values);
        const FloatList& want = std::get<FloatList>(it->second);
        ASSERT_EQ(static_cast<size_t>(n), want.size()) << name;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << name;
      }
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(parsed, 100);
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace kiln::io

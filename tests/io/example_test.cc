// tf.Example: serialisation checked against protobuf wire bytes built by hand, parsing back, and
// parse_example for fixed-length, defaulted and variable-length features and for every error.
#include "kiln/io/example.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/io/wire_format.h"
#include "tests/testing/values.h"

namespace kiln::io {
namespace {

using testing::HasSubstr;

// ---- protobuf wire format by hand (tests/io/wire_format.h) ----

using namespace wire;

// Feature oneof: bytes_list = 1, float_list = 2, int64_list = 3; each list's value = 1, packed.
std::string int64_feature(const std::vector<int64_t>& values) {
  return len_field(3, values.empty() ? "" : len_field(1, packed_ints(values)));
}
std::string float_feature(const std::vector<float>& values) {
  return len_field(2, values.empty() ? "" : len_field(1, packed_floats(values)));
}
std::string bytes_feature(const std::vector<std::string>& values) {
  std::string list;
  for (const std::string& v : values) list += len_field(1, v);
  return len_field(1, list);
}
// Example.features = 1 -> Features.feature = 1: map entries {key = 1, value = 2}.
std::string example_bytes(const std::vector<std::pair<std::string, std::string>>& features) {
  std::string map;
  for (const auto& [key, feature] : features)
    map += len_field(1, len_field(1, key) + len_field(2, feature));
  return len_field(1, map);
}

template <class T>
std::vector<T> values_of(const Tensor& t) {
  auto d = t.data<T>();
  return {d.begin(), d.end()};
}

// ---- serialisation ----

TEST(Example, SerializesToTheWireBytesOfTfExample) {
  Example ex;
  ex.set_int64s("a", {1, 2});
  // 0a 0d | 0a 0b | 0a 01 'a' | 12 06 | 1a 04 | 0a 02 01 02
  const std::string expected(
      "\x0a\x0d\x0a\x0b\x0a\x01"
      "a"
      "\x12\x06\x1a\x04\x0a\x02\x01\x02",
      15);
  EXPECT_EQ(ex.serialize(), expected);
  EXPECT_EQ(example_bytes({{"a", int64_feature({1, 2})}}), expected);
}

TEST(Example, EveryListTypeInNameOrder) {
  Example ex;
  ex.set_floats("f", {1.0f, -0.5f})
      .set_bytes("b", {"xy", std::string("\0\xff", 2)})
      .set_int64s("i", {-1, 300})
      .set_floats("empty", {});
  EXPECT_EQ(ex.serialize(), example_bytes({{"b", bytes_feature({"xy", std::string("\0\xff", 2)})},
                                           {"empty", float_feature({})},
                                           {"f", float_feature({1.0f, -0.5f})},
                                           {"i", int64_feature({-1, 300})}}));
  // -1 is ten varint bytes; 300 is ac 02.
  EXPECT_THAT(ex.serialize(), HasSubstr(std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
                                                    "\xac\x02",
                                                    12)));
}

TEST(Example, SettingANameAgainReplacesIt) {
  Example ex;
  ex.set_int64s("a", {1}).set_floats("a", {2.0f});
  EXPECT_EQ(ex.serialize(), example_bytes({{"a", float_feature({2.0f})}}));
}

TEST(Example, ParsesHandBuiltBytes) {
  const Example ex = Example::parse(example_bytes({{"z", int64_feature({7, -7})},
                                                   {"img", bytes_feature({"abc"})},
                                                   {"w", float_feature({0.25f})}}));
  ASSERT_EQ(ex.features().size(), 3u);
  EXPECT_EQ(std::get<Int64List>(ex.features().at("z")), (Int64List{7, -7}));
  EXPECT_EQ(std::get<BytesList>(ex.features().at("img")), (BytesList{"abc"}));
  EXPECT_EQ(std::get<FloatList>(ex.features().at("w")), (FloatList{0.25f}));
  EXPECT_TRUE(ex.has("z"));
  EXPECT_FALSE(ex.has("nope"));
}

TEST(Example, ParseRejectsGarbage) {
  Error e = test_values::thrown_error([] { Example::parse(std::string("\x0a\xff\xff\x01", 4)); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("not a valid serialized tf.Example"));
}

TEST(Example, SetTensorStoresU8AsOneBytesValue) {
  Example ex;
  ex.set_tensor("img", Tensor::from_list<uint8_t>({1, 2, 3, 250}, {2, 2}))
      .set_tensor("x", Tensor::from_list<double>({0.5, 1.5}))
      .set_tensor("n", Tensor::from_list<int32_t>({-3, 4}));
  EXPECT_EQ(ex.serialize(), example_bytes({{"img", bytes_feature({"\x01\x02\x03\xfa"})},
                                           {"n", int64_feature({-3, 4})},
                                           {"x", float_feature({0.5f, 1.5f})}}));
}

// ---- parse_example ----

TEST(ParseExample, FixedLenFeaturesBatch) {
  std::string image0(784, '\0'), image1(784, '\0');
  for (int i = 0; i < 784; ++i) {
    image0[i] = static_cast<char>(i % 251);
    image1[i] = static_cast<char>(255 - i % 7);
  }
  const std::vector<std::string> batch = {
      example_bytes({{"image", bytes_feature({image0})},
                     {"label", int64_feature({3})},
                     {"xy", float_feature({1, 2, 3, 4})}}),
      // The image split over two bytes values: they are concatenated.
      example_bytes({{"image", bytes_feature({image1.substr(0, 100), image1.substr(100)})},
                     {"label", int64_feature({9})},
                     {"xy", float_feature({-1, -2, -3, -4})},
                     {"ignored", float_feature({1})}}),
  };
  auto out = parse_example(batch, {FixedLen{"image", u8, {784}}, FixedLen{"label", i64, {}},
                                   FixedLen{"xy", f32, {2, 2}}});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out["image"].dtype(), u8);
  EXPECT_EQ(out["image"].shape(), (Shape{2, 784}));
  const auto img = values_of<uint8_t>(out["image"]);
  EXPECT_EQ(std::string(img.begin(), img.begin() + 784), image0);
  EXPECT_EQ(std::string(img.begin() + 784, img.end()), image1);
  EXPECT_EQ(out["label"].dtype(), i64);
  EXPECT_EQ(out["label"].shape(), (Shape{2}));
  EXPECT_EQ(values_of<int64_t>(out["label"]), (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(out["xy"].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values_of<float>(out["xy"]), (std::vector<float>{1, 2, 3, 4, -1, -2, -3, -4}));
}

TEST(ParseExample, RoundTripsExamplesWeSerialize) {
  std::vector<std::string> batch;
  for (int i = 0; i < 3; ++i) {
    batch.push_back(
        Example().set_floats("x", {float(i), float(i) / 2}).set_int64s("y", {i}).serialize());
  }
  auto out = parse_example(batch, {FixedLen{"x", f32, {2}}, FixedLen{"y", i64, {1}}});
  EXPECT_EQ(values_of<float>(out["x"]), (std::vector<float>{0, 0, 1, 0.5f, 2, 1}));
  EXPECT_EQ(out["y"].shape(), (Shape{3, 1}));
  EXPECT_EQ(values_of<int64_t>(out["y"]), (std::vector<int64_t>{0, 1, 2}));
}

TEST(ParseExample, DefaultsFillMissingFeatures) {
  const std::vector<std::string> batch = {
      example_bytes({{"w", float_feature({5, 6})}}),
      example_bytes({}),
      example_bytes({{"other", int64_feature({1})}}),
  };
  auto out = parse_example(
      batch, {FixedLen{"w", f32, {2}, Tensor::scalar(1.5f)},
              FixedLen{"k", i64, {2}, Tensor::from_list<int64_t>({7, 8})},
              FixedLen{"d", f32, {}, Tensor::scalar(int32_t{2})}});  // converted to f32
  EXPECT_EQ(values_of<float>(out["w"]), (std::vector<float>{5, 6, 1.5f, 1.5f, 1.5f, 1.5f}));
  EXPECT_EQ(values_of<int64_t>(out["k"]), (std::vector<int64_t>{7, 8, 7, 8, 7, 8}));
  EXPECT_EQ(out["d"].dtype(), f32);
  EXPECT_EQ(values_of<float>(out["d"]), (std::vector<float>{2, 2, 2}));
}

TEST(ParseExample, VarLenIsPaddedWithLengths) {
  const std::vector<std::string> batch = {
      example_bytes({{"tok", int64_feature({4, 5})}, {"s", bytes_feature({"ab", "c"})}}),
      example_bytes({}),
      example_bytes({{"tok", int64_feature({1, 2, 3})}, {"s", bytes_feature({})}}),
  };
  auto out = parse_example(batch, {VarLen{"tok", i64}, VarLen{"s", u8}, VarLen{"f", f32}});
  EXPECT_EQ(out.size(), 6u);
  EXPECT_EQ(out["tok"].shape(), (Shape{3, 3}));
  EXPECT_EQ(values_of<int64_t>(out["tok"]), (std::vector<int64_t>{4, 5, 0, 0, 0, 0, 1, 2, 3}));
  EXPECT_EQ(values_of<int64_t>(out[lengths_key("tok")]), (std::vector<int64_t>{2, 0, 3}));
  EXPECT_EQ(lengths_key("tok"), "tok/lengths");
  EXPECT_EQ(out["s"].dtype(), u8);
  EXPECT_EQ(out["s"].shape(), (Shape{3, 3}));
  EXPECT_EQ(values_of<uint8_t>(out["s"]), (std::vector<uint8_t>{'a', 'b', 'c', 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(values_of<int64_t>(out["s/lengths"]), (std::vector<int64_t>{3, 0, 0}));
  EXPECT_EQ(out["f"].shape(), (Shape{3, 0}));
  EXPECT_EQ(out["f/lengths"].shape(), (Shape{3}));
}

TEST(ParseExample, EmptyBatch) {
  auto out =
      parse_example(std::vector<std::string>{}, {FixedLen{"x", f32, {2, 3}}, VarLen{"v", i64}});
  EXPECT_EQ(out["x"].shape(), (Shape{0, 2, 3}));
  EXPECT_EQ(out["v"].shape(), (Shape{0, 0}));
  EXPECT_EQ(out["v/lengths"].shape(), (Shape{0}));
}

TEST(ParseExample, MissingRequiredFeatureNamesItAndTheExample) {
  const std::vector<std::string> batch = {example_bytes({{"label", int64_feature({1})}}),
                                          example_bytes({{"other", int64_feature({1})}})};
  Error e = test_values::thrown_error([&] { parse_example(batch, {FixedLen{"label", i64, {}}}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("parse_example"));
  EXPECT_THAT(e.what(), HasSubstr("'label' in example 1"));
  EXPECT_THAT(e.what(), HasSubstr("missing"));
}

TEST(ParseExample, WrongTypeNamesBothLists) {
  const std::vector<std::string> batch = {example_bytes({{"x", float_feature({1})}})};
  Error e = test_values::thrown_error([&] { parse_example(batch, {FixedLen{"x", i64, {}}}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("'x' in example 0"));
  EXPECT_THAT(e.what(), HasSubstr("float_list"));
  EXPECT_THAT(e.what(), HasSubstr("int64_list"));
  Error v = test_values::thrown_error([&] { parse_example(batch, {VarLen{"x", u8}}); });
  EXPECT_THAT(v.what(), HasSubstr("bytes_list"));
}

TEST(ParseExample, WrongLengthNamesCountAndShape) {
  const std::vector<std::string> batch = {example_bytes({{"x", float_feature({1, 2, 3, 4})}}),
                                          example_bytes({{"x", float_feature({1, 2, 3})}})};
  Error e = test_values::thrown_error([&] { parse_example(batch, {FixedLen{"x", f32, {2, 2}}}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("'x' in example 1 has 3 float values"));
  EXPECT_THAT(e.what(), HasSubstr("[2,2] needs 4"));
  const std::vector<std::string> img = {example_bytes({{"img", bytes_feature({"abc"})}})};
  Error b = test_values::thrown_error([&] { parse_example(img, {FixedLen{"img", u8, {784}}}); });
  EXPECT_THAT(b.what(), HasSubstr("has 3 bytes"));
}

TEST(ParseExample, CorruptExampleIsDataLoss) {
  const std::vector<std::string> batch = {example_bytes({}), example_bytes({}),
                                          std::string("\x0a\x05\x01", 3)};
  Error e = test_values::thrown_error([&] { parse_example(batch, {VarLen{"x", f32}}); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("example 2"));
}

TEST(ParseExample, BadSpecsAreRejected) {
  const std::vector<std::string> batch = {example_bytes({})};
  Error dtype = test_values::thrown_error([&] { parse_example(batch, {FixedLen{"x", f64, {}}}); });
  EXPECT_EQ(dtype.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(dtype.what(), HasSubstr("'x': dtype f64"));
  Error dup = test_values::thrown_error([&] {
    parse_example(batch, {VarLen{"x", f32}, FixedLen{"x/lengths", i64, {}}});
  });
  EXPECT_THAT(dup.what(), HasSubstr("'x/lengths' twice"));
  Error shape = test_values::thrown_error([&] {
    parse_example(batch, {FixedLen{"x", f32, {3}, Tensor::from_list<float>({1, 2})}});
  });
  EXPECT_THAT(shape.what(), HasSubstr("default_value has shape [2]"));
  Error unknown = test_values::thrown_error([&] {
    parse_example(batch, {FixedLen{"x", f32, {kUnknownDim}}});
  });
  EXPECT_THAT(unknown.what(), HasSubstr("fully defined"));
}

TEST(ParseExample, RepeatedKeyLastOneWinsAndOddKeysAreIgnored) {
  // A map on the wire may repeat a key (the last entry wins) and hold keys that are not UTF-8.
  const std::string bytes = example_bytes({{"a", int64_feature({1})},
                                           {std::string("\xff\xfe", 2), float_feature({1})},
                                           {"a", int64_feature({2})}});
  EXPECT_EQ(values_of<int64_t>(
                parse_example(std::vector<std::string>{bytes}, {FixedLen{"a", i64, {}}})["a"]),
            std::vector<int64_t>{2});
  const Example ex = Example::parse(bytes);
  EXPECT_EQ(std::get<Int64List>(ex.features().at("a")), Int64List{2});
  EXPECT_EQ(ex.features().size(), 2u);
}

TEST(ParseExample, DamagedBytesNeverCrash) {
  const std::string good = Example()
                               .set_bytes("img", {std::string(16, 'p')})
                               .set_int64s("label", {4})
                               .set_floats("w", {0.5f, 2})
                               .serialize();
  const std::vector<FeatureSpec> spec = {FixedLen{"img", u8, {16}}, FixedLen{"label", i64, {}},
                                         VarLen{"w", f32}};
  auto check = [&](const std::string& damaged) {
    try {
      auto out = parse_example(std::vector<std::string>{damaged}, spec);
      EXPECT_EQ(out["img"].shape(), (Shape{1, 16}));
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == ErrorCode::kDataLoss || e.code() == ErrorCode::kInvalidArgument)
          << e.what();
      EXPECT_THAT(e.what(), HasSubstr("example 0"));
    }
  };
  for_each_damaged(good, check);
}

// Found by fuzz/example_fuzzer: the output was allocated from the spec before any example was
// checked, and a shape whose element count overflows wrapped around.
TEST(ParseExample, HugeShapesAreCheckedBeforeAnyMemoryIsCommitted) {
  const std::vector<std::string> batch = {example_bytes({{"x", bytes_feature({"abc"})}})};
  Error huge = test_values::thrown_error([&] {
    parse_example(batch, {FixedLen{"x", u8, {int64_t{1} << 40}}});
  });
  EXPECT_THAT(huge.what(), HasSubstr("has 3 bytes"));
  Error overflow = test_values::thrown_error([&] {
    parse_example(batch, {FixedLen{"x", u8, {int64_t{1} << 40, int64_t{1} << 40}}});
  });
  EXPECT_EQ(overflow.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(overflow.what(), HasSubstr("[1099511627776,1099511627776] has too many elements"));
  // No examples: an empty batch of the shape, whatever its size.
  auto empty = parse_example(std::vector<std::string>{}, {FixedLen{"x", u8, {int64_t{1} << 40}}});
  EXPECT_EQ(empty["x"].shape(), (Shape{0, int64_t{1} << 40}));
  EXPECT_EQ(empty["x"].nbytes(), 0u);
}

}  // namespace
}  // namespace kiln::io

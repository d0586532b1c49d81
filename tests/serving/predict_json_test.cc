// TF Serving's REST predict format: requests from its documentation's examples decoded into
// tensors, responses encoded, and bad requests rejected with errors naming the input.
#include "serving/predict_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/values.h"

namespace kiln::serving {
namespace {

using test_values::error_of;
using ::testing::HasSubstr;

std::map<std::string, io::SignatureInfo> one_input(DType dtype, Shape shape) {
  io::SignatureInfo sig;
  sig.inputs["x"] = {dtype, std::move(shape)};
  sig.outputs["output_0"] = {f32, {kUnknownDim}};
  return {{"serving_default", sig}};
}

std::map<std::string, io::SignatureInfo> named_inputs() {
  io::SignatureInfo sig;
  sig.inputs["tag"] = {i64, {kUnknownDim}};
  sig.inputs["signal"] = {f32, {kUnknownDim, 5}};
  sig.inputs["sensor"] = {f32, {kUnknownDim, 2, 2}};
  sig.outputs["y"] = {f32, {kUnknownDim}};
  return {{"serving_default", sig}, {"other", sig}};
}

template <class T>
std::vector<T> vals(const Tensor& t) {
  auto d = t.data<T>();
  return {d.begin(), d.end()};
}

TEST(PredictJson, ARowRequestOfOneUnnamedInput) {
  PredictRequest r =
      parse_predict_request(R"({"instances": [1.0, 2.0, 5.0]})", one_input(f32, {kUnknownDim}));
  EXPECT_EQ(r.format, RequestFormat::kRow);
  EXPECT_EQ(r.signature_name, "serving_default");
  ASSERT_EQ(r.inputs.count("x"), 1u);
  EXPECT_EQ(r.inputs["x"].dtype(), f32);
  EXPECT_EQ(r.inputs["x"].shape(), (Shape{3}));
  EXPECT_EQ(vals<float>(r.inputs["x"]), (std::vector<float>{1, 2, 5}));
}

TEST(PredictJson, ARowRequestOfNamedInputsAsInTheDocs) {
  PredictRequest r = parse_predict_request(R"({
      "signature_name": "other",
      "instances": [
        {"tag": 1, "signal": [1, 2, 3, 4, 5], "sensor": [[1, 2], [3, 4]]},
        {"tag": 2, "signal": [6, 7, 8, 9, 10], "sensor": [[5, 6], [7, 8]]}
      ]})",
                                           named_inputs());
  EXPECT_EQ(r.signature_name, "other");
  EXPECT_EQ(r.inputs["tag"].shape(), (Shape{2}));
  EXPECT_EQ(vals<int64_t>(r.inputs["tag"]), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r.inputs["signal"].shape(), (Shape{2, 5}));
  EXPECT_EQ(r.inputs["sensor"].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(vals<float>(r.inputs["sensor"])[7], 8.0f);
}

TEST(PredictJson, AColumnarRequestAndNonFiniteTokens) {
  PredictRequest r = parse_predict_request(
      R"({"inputs": {"tag": [1, 2], "signal": [[1, NaN, 3, Infinity, -Infinity],
          [1, 2, 3, 4, 5]], "sensor": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]}})",
      named_inputs());
  EXPECT_EQ(r.format, RequestFormat::kColumnar);
  std::vector<float> s = vals<float>(r.inputs["signal"]);
  EXPECT_TRUE(std::isnan(s[1]));
  EXPECT_EQ(s[3], INFINITY);
  EXPECT_EQ(s[4], -INFINITY);
  // A single unnamed columnar input: the value itself.
  PredictRequest one = parse_predict_request(R"({"inputs": [[1, 2], [3, 4], [5, 6]]})",
                                             one_input(f64, {kUnknownDim, 2}));
  EXPECT_EQ(one.inputs["x"].dtype(), f64);
  EXPECT_EQ(one.inputs["x"].shape(), (Shape{3, 2}));
}

TEST(PredictJson, B64ValuesAreTheBytesOfAU8Input) {
  // "AAEC/w==" is the bytes 0, 1, 2, 255.
  PredictRequest r =
      parse_predict_request(R"({"instances": [{"b64": "AAEC/w=="}, {"b64": "BAUGBw=="}]})",
                            one_input(u8, {kUnknownDim, 4}));
  EXPECT_EQ(r.inputs["x"].shape(), (Shape{2, 4}));
  EXPECT_EQ(vals<uint8_t>(r.inputs["x"]), (std::vector<uint8_t>{0, 1, 2, 255, 4, 5, 6, 7}));
  EXPECT_EQ(base64_encode(std::string("\0\1\2\xff", 4)), "AAEC/w==");
  EXPECT_EQ(base64_decode("AAEC_w"), std::string("\0\1\2\xff", 4));  // URL-safe, unpadded
  EXPECT_THAT(error_of([] { base64_decode("AA*C"); }), HasSubstr("offset 2"));
}

TEST(PredictJson, BadRequestsNameTheInputAndWhatWasExpected) {
  auto sig = named_inputs();
  auto err = [&](const std::string& body) {
    return error_of([&] { parse_predict_request(body, sig); });
  };
  EXPECT_THAT(err("{\"instances\": [1, 2"), HasSubstr("not valid JSON"));
  EXPECT_THAT(err("{\"instances\": [1, 2"), HasSubstr("offset"));
  EXPECT_THAT(err(R"({"inputs": {"tag": [1], "signal": [[1,2,3,4]], "sensor": [[[1,2],[3,4]]]}})"),
              HasSubstr("input 'signal' has shape [1,4], but the signature wants f32[-1,5]"));
  EXPECT_THAT(
      err(R"({"inputs": {"tag": [1.5], "signal": [[1,2,3,4,5]], "sensor": [[[1,2],[3,4]]]}})"),
      HasSubstr("input 'tag' is i64, but 1.5"));
  EXPECT_THAT(err(R"({"inputs": {"tag": [1], "signal": [[1,2,3,4,5]]}})"),
              HasSubstr("input 'sensor' (f32[-1,2,2]) is missing"));
  EXPECT_THAT(
      err(R"({"inputs": {"tag": [1], "signal": [[1,2,3,4,5]], "sensor": [[[1,2],[3,4]]], "extra": 1}})"),
      HasSubstr("input 'extra' is not one of the signature's inputs"));
  EXPECT_THAT(
      err(R"({"inputs": {"tag": [1], "signal": [[1,2,3,4,5], [1,2,3]], "sensor": [[[1,2],[3,4]]]}})"),
      HasSubstr("input 'signal' is ragged"));
  EXPECT_THAT(err(R"({"instances": [{"tag": 1, "signal": [1,2,3,4,5], "sensor": [[1,2],[3,4]]},
                                   {"tag": 2, "signal": [1,2,3,4,5]}]})"),
              HasSubstr("instance 1: input 'sensor'"));
  EXPECT_THAT(
      err(R"({"instances": [{"tag": true, "signal": [1,2,3,4,5], "sensor": [[1,2],[3,4]]}]})"),
      HasSubstr("input 'tag' is i64, but a boolean was given"));
  EXPECT_THAT(err(R"({"instances": [1], "inputs": [1]})"), HasSubstr("exactly one of"));
  EXPECT_THAT(err(R"({"signature_name": "nope", "instances": []})"),
              HasSubstr("signature 'nope' is not one of the model's ('other', 'serving_default')"));
  EXPECT_THAT(err(R"({"instances": [1, 2]})"), HasSubstr("each instance must be an object"));
  EXPECT_THAT(error_of([] {
                parse_predict_request(R"({"instances": [300]})", one_input(u8, {kUnknownDim}));
              }),
              HasSubstr("300 is out of its range"));
}

TEST(PredictJson, ResponsesInRowAndColumnarForm) {
  Tensor y = Tensor::from_vector<float>({0.5f, NAN, INFINITY, -1.25f}, {2, 2});
  Tensor ids = Tensor::from_vector<int64_t>({3, 4}, {2});
  EXPECT_EQ(format_predict_response({{"y", y}}, RequestFormat::kRow),
            R"({"predictions": [[0.5, NaN], [Infinity, -1.25]]})");
  EXPECT_EQ(format_predict_response({{"y", y}}, RequestFormat::kColumnar),
            R"({"outputs": [[0.5, NaN], [Infinity, -1.25]]})");
  EXPECT_EQ(
      format_predict_response({{"y", y}, {"ids", ids}}, RequestFormat::kRow),
      R"({"predictions": [{"ids": 3, "y": [0.5, NaN]}, {"ids": 4, "y": [Infinity, -1.25]}]})");
  EXPECT_EQ(format_predict_response({{"y", y}, {"ids", ids}}, RequestFormat::kColumnar),
            R"({"outputs": {"ids": [3, 4], "y": [[0.5, NaN], [Infinity, -1.25]]}})");
  // f32 values are written in their shortest round-trip form.
  EXPECT_EQ(
      format_predict_response({{"y", Tensor::from_vector<float>({0.1f})}}, RequestFormat::kRow),
      R"({"predictions": [0.1]})");
  Tensor img = Tensor::from_vector<uint8_t>({0, 1, 2, 255}, {1, 4});
  EXPECT_EQ(format_predict_response({{"image_bytes", img}}, RequestFormat::kRow),
            R"({"predictions": [{"b64": "AAEC/w=="}]})");
  EXPECT_THAT(
      error_of([&] {
        format_predict_response({{"y", y}, {"s", Tensor::scalar(1.0f)}}, RequestFormat::kRow);
      }),
      HasSubstr("use \"inputs\" for a columnar response"));
  EXPECT_EQ(error_json("a \"quoted\"\nline"), R"({"error": "a \"quoted\"\nline"})");
}

}  // namespace
}  // namespace kiln::serving

// Dataset::ragged_batch and Dataset::parse_example: records of different lengths batched as
// (values, row_splits), drop_remainder, errors naming the element and component, and batches of
// TFRecord records parsed in one call per batch, sequentially and on two threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/io/example.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::data {
namespace {

using test_values::error_of;
using testing::HasSubstr;

std::vector<Element> collect(const Dataset& ds) {
  std::vector<Element> out;
  Iterator it = ds.begin_epoch();
  while (std::optional<Element> e = it.next()) out.push_back(std::move(*e));
  return out;
}

template <class T>
std::vector<T> values_of(const Tensor& t) {
  auto d = t.data<T>();
  return {d.begin(), d.end()};
}

// Element i: {u8 [i % 4] holding i, i64 [i % 3, 2] holding -i} for i in [0, n).
Dataset ragged_source(int64_t n) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  return Dataset::from_tensors({Tensor::from_vector(ids)}).map([](Element e) -> Element {
    const int64_t i = e[0].item<int64_t>();
    return {Tensor::from_vector(std::vector<uint8_t>(i % 4, static_cast<uint8_t>(i))),
            Tensor::from_vector(std::vector<int64_t>((i % 3) * 2, -i), {i % 3, 2})};
  });
}

TEST(DatasetRaggedBatch, JoinsComponentsWithRowSplits) {
  std::vector<Element> batches = collect(ragged_source(7).ragged_batch(3));
  ASSERT_EQ(batches.size(), 3u);  // 3 + 3 + 1
  ASSERT_EQ(batches[0].size(), 4u);
  // Elements 0, 1, 2: u8 of 0, 1, 2 values; i64 of 0, 1, 2 rows.
  EXPECT_EQ(values_of<uint8_t>(batches[0][0]), (std::vector<uint8_t>{1, 2, 2}));
  EXPECT_EQ(values_of<int64_t>(batches[0][1]), (std::vector<int64_t>{0, 0, 1, 3}));
  EXPECT_EQ(batches[0][2].shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of<int64_t>(batches[0][2]), (std::vector<int64_t>{-1, -1, -2, -2, -2, -2}));
  EXPECT_EQ(values_of<int64_t>(batches[0][3]), (std::vector<int64_t>{0, 0, 1, 3}));
  // Elements 3, 4, 5: u8 of 3, 0, 1 values; i64 of 0, 1, 2 rows.
  EXPECT_EQ(values_of<uint8_t>(batches[1][0]), (std::vector<uint8_t>{3, 3, 3, 5}));
  EXPECT_EQ(values_of<int64_t>(batches[1][1]), (std::vector<int64_t>{0, 3, 3, 4}));
  EXPECT_EQ(values_of<int64_t>(batches[1][3]), (std::vector<int64_t>{0, 0, 1, 3}));
  // Element 6 alone: 2 values, 0 rows.
  EXPECT_EQ(values_of<uint8_t>(batches[2][0]), (std::vector<uint8_t>{6, 6}));
  EXPECT_EQ(values_of<int64_t>(batches[2][1]), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(batches[2][2].shape(), (Shape{0, 2}));
  EXPECT_EQ(values_of<int64_t>(batches[2][3]), (std::vector<int64_t>{0, 0}));
}

TEST(DatasetRaggedBatch, DropRemainderAndEmptyInputs) {
  EXPECT_EQ(collect(ragged_source(7).ragged_batch(3, /*drop_remainder=*/true)).size(), 2u);
  EXPECT_EQ(collect(ragged_source(6).ragged_batch(3, true)).size(), 2u);
  EXPECT_EQ(collect(ragged_source(2).ragged_batch(3, true)).size(), 0u);
  EXPECT_EQ(collect(ragged_source(0).ragged_batch(3)).size(), 0u);
  EXPECT_EQ(ragged_source(7).ragged_batch(3).cardinality(), 3);
  EXPECT_EQ(ragged_source(7).ragged_batch(3, true).cardinality(), 2);
  // Elements that are all empty make empty values and zero row_splits.
  std::vector<Element> empty = collect(ragged_source(1).ragged_batch(4));
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0][0].shape(), (Shape{0}));
  EXPECT_EQ(values_of<int64_t>(empty[0][1]), (std::vector<int64_t>{0, 0}));
}

TEST(DatasetRaggedBatch, Errors) {
  EXPECT_THAT(error_of([] { ragged_source(3).ragged_batch(0); }),
              HasSubstr("Dataset.ragged_batch: the batch size must be at least 1, not 0"));
  Dataset scalars = Dataset::from_tensors({Tensor::from_list<float>({1, 2})});
  EXPECT_THAT(error_of([&] { collect(scalars.ragged_batch(2)); }),
              HasSubstr("ragged_batch: component 0 of element 0 of the batch is a scalar"));
  Dataset mixed = ragged_source(3).map([](Element e) -> Element {
    if (e[0].dim(0) == 2) e[1] = Tensor::from_list<int64_t>({1, 2, 3}, {1, 3});
    return e;
  });
  EXPECT_THAT(error_of([&] { collect(mixed.ragged_batch(3)); }),
              HasSubstr("component 1 of element 2 of the batch has shape [1,3], in element 0 it "
                        "has shape [0,2]; only the first dimension may differ"));
  Dataset types = ragged_source(3).map([](Element e) -> Element {
    if (e[0].dim(0) == 1) e[0] = e[0].to(f32);
    return e;
  });
  EXPECT_THAT(error_of([&] { collect(types.ragged_batch(3)); }),
              HasSubstr("component 0 of element 1 of the batch is f32, in element 0 it is u8"));
}

class DatasetParseExample : public testing_util::TempDirTest {
 protected:
  // n records: "img" 4 bytes (i, i+1, i+2, i+3), "label" i, "tok" i % 3 values (i, ...).
  std::string write(int64_t n, int64_t corrupt = -1) {
    const std::string file = path("r.tfrecord");
    io::RecordWriter writer(file);
    for (int64_t i = 0; i < n; ++i) {
      std::string img;
      for (int k = 0; k < 4; ++k) img.push_back(static_cast<char>(i + k));
      std::string bytes = io::Example()
                              .set_bytes("img", {img})
                              .set_int64s("label", {i})
                              .set_int64s("tok", std::vector<int64_t>(i % 3, i))
                              .serialize();
      if (i == corrupt) bytes.resize(bytes.size() - 2);
      writer.write(bytes);
    }
    writer.close();
    return file;
  }
  const std::vector<io::FeatureSpec> spec_ = {
      io::FixedLen{"img", u8, {2, 2}}, io::FixedLen{"label", i64, {}}, io::VarLen{"tok", i64}};
};

TEST_F(DatasetParseExample, ParsesEachBatchInOneCall) {
  const std::string file = write(10);
  for (int64_t threads : {1, 2}) {
    std::vector<Element> batches =
        collect(Dataset::tfrecord({file}).ragged_batch(4).parse_example(spec_, threads));
    ASSERT_EQ(batches.size(), 3u);
    for (size_t b = 0; b < batches.size(); ++b) {
      const Element& e = batches[b];
      ASSERT_EQ(e.size(), 4u);  // img, label, tok values, tok lengths
      const int64_t k = b < 2 ? 4 : 2;
      EXPECT_EQ(e[0].shape(), (Shape{k, 2, 2}));
      std::vector<uint8_t> img;
      std::vector<int64_t> label, lengths, tok;
      const int64_t width = k == 4 ? 2 : 2;  // the most tok values in each batch is 2
      for (int64_t j = 0; j < k; ++j) {
        const int64_t i = static_cast<int64_t>(b) * 4 + j;
        for (int q = 0; q < 4; ++q) img.push_back(static_cast<uint8_t>(i + q));
        label.push_back(i);
        lengths.push_back(i % 3);
        for (int64_t q = 0; q < width; ++q) tok.push_back(q < i % 3 ? i : 0);
      }
      EXPECT_EQ(values_of<uint8_t>(e[0]), img);
      EXPECT_EQ(values_of<int64_t>(e[1]), label);
      EXPECT_EQ(e[2].shape(), (Shape{k, width}));
      EXPECT_EQ(values_of<int64_t>(e[2]), tok);
      EXPECT_EQ(values_of<int64_t>(e[3]), lengths);
    }
  }
}

TEST_F(DatasetParseExample, DropRemainderAndEmptyFiles) {
  const std::string file = write(10);
  EXPECT_EQ(collect(Dataset::tfrecord({file}).ragged_batch(4, true).parse_example(spec_)).size(),
            2u);
  const std::string empty = write(0);
  EXPECT_EQ(collect(Dataset::tfrecord({empty}).ragged_batch(4).parse_example(spec_, 2)).size(), 0u);
}

TEST_F(DatasetParseExample, ErrorsNameTheRecordInItsBatchAndArriveInOrder) {
  const std::string file = write(10, /*corrupt=*/6);  // batch 1, record 2 of it
  for (int64_t threads : {1, 2}) {
    Iterator it =
        Dataset::tfrecord({file}).ragged_batch(4).parse_example(spec_, threads).begin_epoch();
    ASSERT_TRUE(it.next());  // batch 0 is good
    const std::string message = error_of([&] { it.next(); });
    EXPECT_THAT(message, HasSubstr("parse_example: example 2 ("));
    EXPECT_THAT(message, HasSubstr("not a valid serialized tf.Example"));
    EXPECT_FALSE(it.next());  // the epoch ended with the error
  }
}

TEST_F(DatasetParseExample, RefusesBadSpecsAtOnceAndUnbatchedRecordsAtNext) {
  const std::string file = write(3);
  EXPECT_THAT(
      error_of([&] {
        Dataset::tfrecord({file}).ragged_batch(2).parse_example({io::FixedLen{"x", f64, {}}});
      }),
      HasSubstr("dtype f64 is not readable from a tf.Example"));
  EXPECT_THAT(error_of([&] { collect(Dataset::tfrecord({file}).parse_example(spec_)); }),
              HasSubstr("apply ragged_batch(n) to the records first"));
}

}  // namespace
}  // namespace kiln::data

// kiln::data::Dataset: every source and transformation against hand-checked elements, order
// and determinism under threads, errors arriving at the right position, cache files reused,
// rebuilt when stale or corrupt, and iterators destroyed mid-epoch without hangs or leaks.
#include "kiln/data/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/idx.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "runtime/thread_pool.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;
using testing::ElementsAre;
using testing::HasSubstr;

// ---- helpers ----

// Elements 0, 1, ..., n-1 as i64 scalars.
Dataset range(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return Dataset::from_tensors({Tensor::from_vector(v)});
}

std::vector<Element> collect(const Dataset& ds, int64_t epoch = 0) {
  std::vector<Element> out;
  Iterator it = ds.begin_epoch(epoch);
  while (std::optional<Element> e = it.next()) out.push_back(std::move(*e));
  return out;
}

// Component 0 of each element, a scalar, as int64.
std::vector<int64_t> scalars(const Dataset& ds, int64_t epoch = 0) {
  std::vector<int64_t> out;
  for (const Element& e : collect(ds, epoch)) out.push_back(e[0].item<int64_t>());
  return out;
}

std::string as_string(const Tensor& t) {
  auto d = t.data<uint8_t>();
  return {d.begin(), d.end()};
}

Element times(Element e, int64_t k) { return {Tensor::scalar(e[0].item<int64_t>() * k)}; }

// A map function that fails on one value.
Dataset::MapFn fail_at(int64_t bad) {
  return [bad](Element e) {
    if (e[0].item<int64_t>() == bad) {
      throw Error(ErrorCode::kInvalidArgument, "bad element " + std::to_string(bad));
    }
    return e;
  };
}

// A pause of 0 to 1.5 ms that varies from element to element.
void jitter(int64_t v) {
  std::this_thread::sleep_for(std::chrono::microseconds((v * 7919) % 1500));
}

class DatasetFiles : public testing_util::TempDirTest {
 protected:
  std::string write_records(const std::string& name, const std::vector<std::string>& records,
                            io::Compression compression = io::Compression::kNone) const {
    io::RecordWriter writer(path(name), compression);
    for (const std::string& r : records) writer.write(r);
    writer.close();
    return path(name);
  }
};

// ---- from_tensors ----

TEST(DatasetFromTensors, SlicesAlongDimensionZero) {
  Dataset ds = Dataset::from_tensors({Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2}),
                                      Tensor::from_list<int32_t>({7, 8, 9})});
  EXPECT_EQ(ds.cardinality(), 3);
  std::vector<Element> elements = collect(ds);
  ASSERT_EQ(elements.size(), 3u);
  EXPECT_EQ(elements[1][0].shape(), (Shape{2}));
  EXPECT_EQ(elements[1][0].to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(elements[2][0].to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(elements[2][1].shape(), Shape{});
  EXPECT_EQ(elements[2][1].dtype(), i32);
  EXPECT_EQ(elements[2][1].item<int32_t>(), 9);
}

TEST(DatasetFromTensors, ZeroRowsAndZeroSizedRows) {
  EXPECT_TRUE(collect(Dataset::from_tensors({Tensor::empty(f32, {0, 4})})).empty());
  std::vector<Element> e = collect(Dataset::from_tensors({Tensor::empty(f32, {2, 0})}));
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1][0].shape(), (Shape{0}));
}

TEST(DatasetFromTensors, RejectsMismatchedLengthsScalarsAndNothing) {
  try {
    Dataset::from_tensors({Tensor::empty(f32, {3, 2}), Tensor::empty(i32, {4})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("from_tensors"));
    EXPECT_THAT(e.what(), HasSubstr("[3,2]"));
    EXPECT_THAT(e.what(), HasSubstr("[4]"));
  }
  EXPECT_THROW(Dataset::from_tensors({Tensor::scalar(1.0f)}), Error);
  EXPECT_THROW(Dataset::from_tensors({}), Error);
  EXPECT_THROW(Dataset::from_tensors({Tensor()}), Error);
}

TEST(Dataset, DefaultIsEmpty) {
  Dataset ds;
  EXPECT_EQ(ds.cardinality(), 0);
  EXPECT_TRUE(collect(ds).empty());
  Iterator it;
  EXPECT_FALSE(it.next().has_value());
}

// ---- map and filter ----

TEST(DatasetMap, AppliesTheFunctionInOrder) {
  Dataset ds = range(5).map([](Element e) { return times(std::move(e), 10); });
  EXPECT_THAT(scalars(ds), ElementsAre(0, 10, 20, 30, 40));
  EXPECT_EQ(ds.cardinality(), 5);
}

TEST(DatasetMap, ParallelKeepsOrderDespiteRandomDelays) {
  std::atomic<int> calls = 0;
  Dataset ds = range(300).map(
      [&](Element e) {
        ++calls;
        jitter(e[0].item<int64_t>());
        return times(std::move(e), 3);
      },
      4);
  std::vector<int64_t> expected(300);
  for (int64_t i = 0; i < 300; ++i) expected[i] = 3 * i;
  EXPECT_EQ(scalars(ds), expected);
  EXPECT_EQ(calls.load(), 300);
  EXPECT_EQ(scalars(ds, 1), expected);  // a second epoch, new threads
}

TEST(DatasetMap, ParallelMapRunsEagerOpsOnItsThreads) {
  Dataset ds =
      Dataset::from_tensors({Tensor::from_list<uint8_t>({0, 51, 102, 255, 0, 255}, {3, 2})})
          .map([](Element e) { return Element{e[0].to(f32) / 255.0}; }, kAutotune);
  std::vector<Element> out = collect(ds);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0][0].dtype(), f32);
  EXPECT_EQ(out[0][0].to_vector<float>(), (std::vector<float>{0.0f, 0.2f}));
  EXPECT_EQ(out[1][0].to_vector<float>(), (std::vector<float>{0.4f, 1.0f}));
  EXPECT_EQ(out[2][0].to_vector<float>(), (std::vector<float>{0.0f, 1.0f}));
}

TEST(DatasetMap, NondeterministicYieldsEveryElementOnce) {
  Dataset ds = range(200).map(
      [](Element e) {
        jitter(e[0].item<int64_t>());
        return e;
      },
      4, /*deterministic=*/false);
  std::vector<int64_t> got = scalars(ds);
  std::sort(got.begin(), got.end());
  std::vector<int64_t> expected(200);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(got, expected);
}

TEST(DatasetMap, RejectsBadArguments) {
  EXPECT_THROW(range(3).map(nullptr), Error);
  EXPECT_THROW(range(3).map([](Element e) { return e; }, 0), Error);
  EXPECT_THROW(range(3).map([](Element e) { return e; }, -2), Error);
}

TEST(DatasetFilter, KeepsElementsWherePredicateHolds) {
  Dataset ds = range(10).filter([](const Element& e) { return e[0].item<int64_t>() % 3 == 0; });
  EXPECT_THAT(scalars(ds), ElementsAre(0, 3, 6, 9));
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.repeat().cardinality(), kInfiniteCardinality);
}

// ---- errors through map and prefetch ----

TEST(DatasetErrors, MapErrorArrivesAtItsPositionThenTheEpochEnds) {
  for (int64_t threads : {1, 4}) {
    for (bool prefetch : {false, true}) {
      Dataset ds = range(20).map(fail_at(7), threads);
      if (prefetch) ds = ds.prefetch(3);
      Iterator it = ds.begin_epoch();
      for (int64_t i = 0; i < 7; ++i) {
        std::optional<Element> e = it.next();
        ASSERT_TRUE(e.has_value()) << threads << " threads";
        EXPECT_EQ((*e)[0].item<int64_t>(), i);
      }
      try {
        it.next();
        FAIL() << "expected the map error, threads " << threads << " prefetch " << prefetch;
      } catch (const Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("bad element 7"));
      }
      EXPECT_FALSE(it.next().has_value());
    }
  }
}

TEST(DatasetErrors, NonKilnExceptionsTravelToo) {
  Dataset ds = range(5)
                   .map(
                       [](Element e) -> Element {
                         if (e[0].item<int64_t>() == 2) throw std::runtime_error("boom");
                         return e;
                       },
                       3)
                   .prefetch(2);
  Iterator it = ds.begin_epoch();
  EXPECT_TRUE(it.next().has_value());
  EXPECT_TRUE(it.next().has_value());
  EXPECT_THROW(it.next(), std::runtime_error);
}

TEST(DatasetErrors, BatchErrorThroughPrefetchAndParallelMap) {
  // Element 4 has another shape: the second batch fails, the first arrives.
  Dataset ds = range(8)
                   .map(
                       [](Element e) {
                         int64_t v = e[0].item<int64_t>();
                         return Element{Tensor::empty(f32, {v == 4 ? 3 : 2})};
                       },
                       2)
                   .batch(3)
                   .prefetch(2);
  Iterator it = ds.begin_epoch();
  std::optional<Element> first = it.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ((*first)[0].shape(), (Shape{3, 2}));
  try {
    it.next();
    FAIL() << "expected a batch error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("batch"));
    EXPECT_THAT(e.what(), HasSubstr("element 1 of the batch has shape [3]"));
    EXPECT_THAT(e.what(), HasSubstr("[2]"));
  }
}

// ---- shuffle ----

TEST(DatasetShuffle, SameSeedAndEpochSameOrder) {
  Dataset ds = range(100).shuffle(20, 42);
  std::vector<int64_t> a = scalars(ds, 3);
  EXPECT_EQ(scalars(range(100).shuffle(20, 42), 3), a);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);  // a permutation
  EXPECT_NE(a, expected);
}

TEST(DatasetShuffle, ReshufflesAcrossEpochsAndSeeds) {
  Dataset ds = range(100).shuffle(100, 7);
  EXPECT_NE(scalars(ds, 0), scalars(ds, 1));
  EXPECT_NE(scalars(ds, 0), scalars(range(100).shuffle(100, 8), 0));
  Dataset fixed = range(100).shuffle(100, 7, /*reshuffle_each_iteration=*/false);
  EXPECT_EQ(scalars(fixed, 0), scalars(fixed, 1));
  EXPECT_EQ(scalars(fixed, 5), scalars(ds, 0));
}

// Over an in-memory source shuffle keeps indices in its buffer and makes only the elements it
// hands out; the order is exactly that of the buffer of elements (a map in between hides the
// random access), for every buffer size, seed, epoch and reshuffle setting.
TEST(DatasetShuffle, IndexBufferGivesTheElementBufferOrder) {
  const Dataset in_memory = range(100);
  const Dataset streamed = range(100).map([](Element e) { return e; });
  for (int64_t buffer : {1, 2, 7, 37, 99, 100, 101, 1000}) {
    for (uint64_t seed : {0u, 5u}) {
      for (bool reshuffle : {true, false}) {
        for (int64_t epoch : {0, 1, 2}) {
          ASSERT_EQ(scalars(in_memory.shuffle(buffer, seed, reshuffle), epoch),
                    scalars(streamed.shuffle(buffer, seed, reshuffle), epoch))
              << "buffer " << buffer << " seed " << seed << " epoch " << epoch;
        }
      }
    }
  }
  // Rows of several components come whole.
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor y = Tensor::from_vector(std::vector<int64_t>{10, 11, 12});
  for (const Element& e : collect(Dataset::from_tensors({x, y}).shuffle(3, 1))) {
    const int64_t row = e[1].item<int64_t>() - 10;
    EXPECT_EQ(e[0].to_vector<float>(), (std::vector<float>{2.0f * static_cast<float>(row),
                                                           2.0f * static_cast<float>(row) + 1}));
  }
}

TEST(DatasetShuffle, ElementsComeOnlyFromTheBuffer) {
  // With a buffer of k, output position i holds one of the first i + k inputs; a buffer of 1
  // changes nothing.
  for (int64_t k : {1, 2, 5}) {
    std::vector<int64_t> out = scalars(range(50).shuffle(k, 3));
    for (size_t i = 0; i < out.size(); ++i) EXPECT_LE(out[i], static_cast<int64_t>(i) + k - 1);
  }
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(scalars(range(50).shuffle(1, 3)), identity);
  EXPECT_THROW(range(5).shuffle(0, 1), Error);
}

TEST(DatasetShuffle, RepeatReshufflesEachRepetition) {
  std::vector<int64_t> out = scalars(range(30).shuffle(30, 1).repeat(2));
  ASSERT_EQ(out.size(), 60u);
  std::vector<int64_t> first(out.begin(), out.begin() + 30), second(out.begin() + 30, out.end());
  EXPECT_NE(first, second);
  std::sort(first.begin(), first.end());
  std::sort(second.begin(), second.end());
  EXPECT_EQ(first, second);
  // Epoch 0 of the repeat is shuffle epochs 0 and 1.
  Dataset shuffled = range(30).shuffle(30, 1);
  std::vector<int64_t> expected = scalars(shuffled, 0);
  std::vector<int64_t> e1 = scalars(shuffled, 1);
  expected.insert(expected.end(), e1.begin(), e1.end());
  EXPECT_EQ(out, expected);
}

// ---- batch and padded_batch ----

TEST(DatasetBatch, StacksAlongNewDimensionZero) {
  Dataset ds = range(7).batch(3);
  EXPECT_EQ(ds.cardinality(), 3);
  std::vector<Element> b = collect(ds);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0][0].shape(), (Shape{3}));
  EXPECT_EQ(b[1][0].to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(b[2][0].to_vector<int64_t>(), (std::vector<int64_t>{6}));

  Dataset dropped = range(7).batch(3, /*drop_remainder=*/true);
  EXPECT_EQ(dropped.cardinality(), 2);
  EXPECT_EQ(collect(dropped).size(), 2u);
  EXPECT_TRUE(collect(range(2).batch(3, true)).empty());
}

TEST(DatasetBatch, StacksEveryComponent) {
  Dataset ds = Dataset::from_tensors({Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {3, 2}),
                                      Tensor::from_list<bool>({true, false, true})})
                   .batch(2);
  std::vector<Element> b = collect(ds);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0][0].shape(), (Shape{2, 2}));
  EXPECT_EQ(b[0][0].to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(b[0][1].dtype(), bool_);
  EXPECT_EQ(b[0][1].to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(b[1][0].shape(), (Shape{1, 2}));
  EXPECT_EQ(b[1][0].to_vector<float>(), (std::vector<float>{5, 6}));
}

// batch over an in-memory source (read in order or through shuffle's index buffer) gathers the
// rows straight into the batch; a map in between makes it stack element by element. Both give
// the same batches: every component, the last partial batch, drop_remainder, zero-sized rows.
TEST(DatasetBatch, GatheredRowsEqualStackedElements) {
  std::vector<float> xs(23 * 3);
  std::iota(xs.begin(), xs.end(), 0.0f);
  std::vector<int64_t> ys(23);
  std::iota(ys.begin(), ys.end(), 100);
  const Dataset in_memory = Dataset::from_tensors(
      {Tensor::from_vector(xs, {23, 3}), Tensor::from_vector(ys), zeros({23, 0})});
  const Dataset streamed = in_memory.map([](Element e) { return e; });
  auto same_batches = [](const Dataset& a, const Dataset& b, int64_t epoch) {
    std::vector<Element> ea = collect(a, epoch), eb = collect(b, epoch);
    ASSERT_EQ(ea.size(), eb.size());
    for (size_t i = 0; i < ea.size(); ++i) {
      ASSERT_EQ(ea[i].size(), 3u);
      EXPECT_EQ(ea[i][0].shape(), eb[i][0].shape()) << "batch " << i;
      EXPECT_EQ(ea[i][0].to_vector<float>(), eb[i][0].to_vector<float>()) << "batch " << i;
      EXPECT_EQ(ea[i][1].to_vector<int64_t>(), eb[i][1].to_vector<int64_t>()) << "batch " << i;
      EXPECT_EQ(ea[i][2].shape(), eb[i][2].shape()) << "batch " << i;
    }
  };
  for (int64_t n : {1, 5, 23, 40}) {
    for (bool drop : {false, true}) {
      same_batches(in_memory.batch(n, drop), streamed.batch(n, drop), 0);
      for (int64_t epoch : {0, 1}) {
        same_batches(in_memory.shuffle(7, 3).batch(n, drop), streamed.shuffle(7, 3).batch(n, drop),
                     epoch);
      }
    }
  }
  // The gathered batches hold the rows the shuffled elements hold.
  std::vector<Element> b = collect(in_memory.shuffle(23, 1).batch(10));
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[2][0].shape(), (Shape{3, 3}));
  const std::vector<float> x = b[1][0].to_vector<float>();
  const std::vector<int64_t> y = b[1][1].to_vector<int64_t>();
  for (size_t r = 0; r < y.size(); ++r) {
    EXPECT_EQ(x[r * 3], static_cast<float>((y[r] - 100) * 3)) << "row " << r;
  }
}

TEST(DatasetBatch, RejectsMismatchedDtypesAndComponentCounts) {
  Dataset dtypes = range(4).map([](Element e) {
    return Element{e[0].item<int64_t>() == 1 ? Tensor::scalar(1.0f) : Tensor::scalar(1)};
  });
  try {
    collect(dtypes.batch(2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("batch: component 0 of element 1 of the batch is f32"));
    EXPECT_THAT(e.what(), HasSubstr("i32"));
  }
  Dataset counts = range(4).map([](Element e) {
    if (e[0].item<int64_t>() == 1) e.push_back(e[0]);
    return e;
  });
  EXPECT_THROW(collect(counts.batch(2)), Error);
  EXPECT_THROW(range(3).batch(0), Error);
}

TEST(DatasetPaddedBatch, PadsToTheLargestInTheBatch) {
  // Element i is [1, ..., len_i] with lengths 1, 3, 2, 0.
  Dataset ds = Dataset::from_tensors({Tensor::from_list<int32_t>({1, 3, 2, 0})}).map([](Element e) {
    int32_t n = e[0].item<int32_t>();
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 1);
    return Element{Tensor::from_vector(v), e[0]};
  });
  std::vector<Element> b = collect(ds.padded_batch(3));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0][0].shape(), (Shape{3, 3}));
  EXPECT_EQ(b[0][0].to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 0, 1, 2, 3, 1, 2, 0}));
  EXPECT_EQ(b[0][1].to_vector<int32_t>(), (std::vector<int32_t>{1, 3, 2}));
  EXPECT_EQ(b[1][0].shape(), (Shape{1, 0}));  // the last batch: one empty vector

  std::vector<Element> fixed = collect(ds.padded_batch(2, {{4}, {}}, {-1, 0}));
  ASSERT_EQ(fixed.size(), 2u);
  EXPECT_EQ(fixed[0][0].shape(), (Shape{2, 4}));
  EXPECT_EQ(fixed[0][0].to_vector<int32_t>(), (std::vector<int32_t>{1, -1, -1, -1, 1, 2, 3, -1}));
  EXPECT_EQ(fixed[1][0].to_vector<int32_t>(), (std::vector<int32_t>{1, 2, -1, -1, -1, -1, -1, -1}));
}

TEST(DatasetPaddedBatch, PaddingValuesOfF16AndBf16RoundOnce) {
  // 2049.0000001 rounds to 2050 in f16 (through f32 first it became 2048); 2^30 + 2^22 + 1
  // rounds to 2^30 + 2^23 in bf16 (through f32: 2^30).
  for (DType dtype : {f16, bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double pad = dtype == f16 ? 2049.0000001 : 1073741824.0 + 4194304.0 + 1.0;
    const double want = dtype == f16 ? 2050.0 : 1073741824.0 + 8388608.0;
    Dataset ds = Dataset::from_tensors({Tensor::from_list<int32_t>({1, 2})}).map([&](Element e) {
      return Element{zeros({e[0].item<int32_t>()}, dtype)};
    });
    std::vector<Element> b = collect(ds.padded_batch(2, {{3}}, {pad}));
    ASSERT_EQ(b.size(), 1u);
    std::vector<double> values = b[0][0].to_vector<double>();
    EXPECT_EQ(values, (std::vector<double>{0, want, want, 0, 0, want}));
  }
}

TEST(DatasetPaddedBatch, PadsMatricesInEachDimension) {
  // A [1,2] and a [2,1] f32 matrix, padded to [2,3] with 9 in dimension 1 fixed.
  Dataset ds = Dataset::from_tensors({Tensor::from_list<int32_t>({0, 1})}).map([](Element e) {
    return Element{e[0].item<int32_t>() == 0 ? Tensor::from_list<float>({1, 2}, {1, 2})
                                             : Tensor::from_list<float>({3, 4}, {2, 1})};
  });
  std::vector<Element> b = collect(ds.padded_batch(2, {{kUnknownDim, 3}}, {9}));
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0][0].shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(b[0][0].to_vector<float>(), (std::vector<float>{1, 2, 9, 9, 9, 9, 3, 9, 9, 4, 9, 9}));
}

TEST(DatasetPaddedBatch, Errors) {
  Dataset ds = Dataset::from_tensors({Tensor::empty(f32, {2, 5})});
  try {
    collect(ds.padded_batch(2, {{4}}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("padded_batch"));
    EXPECT_THAT(e.what(), HasSubstr("[5]"));
    EXPECT_THAT(e.what(), HasSubstr("larger than its padded shape [4]"));
  }
  EXPECT_THROW(collect(ds.padded_batch(2, {{4, 4}})), Error);    // rank
  EXPECT_THROW(collect(ds.padded_batch(2, {{9}, {9}})), Error);  // component count
  EXPECT_THROW(collect(ds.padded_batch(2, {}, {1, 2})), Error);
  EXPECT_THROW(ds.padded_batch(2, {{-3}}), Error);
  Dataset ranks = range(2).map([](Element e) {
    return Element{e[0].item<int64_t>() == 0 ? Tensor::empty(f32, {2}) : Tensor::empty(f32, {})};
  });
  try {
    collect(ranks.padded_batch(2));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank"));
  }
}

// ---- repeat, take, skip, shard ----

TEST(DatasetRepeat, RepeatsCountTimesOrForever) {
  EXPECT_THAT(scalars(range(3).repeat(2)), ElementsAre(0, 1, 2, 0, 1, 2));
  EXPECT_EQ(range(3).repeat(2).cardinality(), 6);
  EXPECT_TRUE(scalars(range(3).repeat(0)).empty());
  Dataset forever = range(3).repeat();
  EXPECT_EQ(forever.cardinality(), kInfiniteCardinality);
  EXPECT_THAT(scalars(forever.take(7)), ElementsAre(0, 1, 2, 0, 1, 2, 0));
  EXPECT_EQ(forever.take(7).cardinality(), 7);
  // An empty dataset repeated forever ends rather than spinning.
  EXPECT_TRUE(scalars(range(0).repeat()).empty());
  EXPECT_EQ(range(0).repeat().cardinality(), 0);
  EXPECT_THROW(range(3).repeat(-2), Error);
}

TEST(DatasetTakeSkipShard, HandChecked) {
  EXPECT_THAT(scalars(range(10).take(3)), ElementsAre(0, 1, 2));
  EXPECT_THAT(scalars(range(2).take(5)), ElementsAre(0, 1));
  EXPECT_EQ(range(10).take(-1).cardinality(), 10);
  EXPECT_EQ(range(10).take(3).cardinality(), 3);
  EXPECT_THAT(scalars(range(5).skip(3)), ElementsAre(3, 4));
  EXPECT_TRUE(scalars(range(5).skip(9)).empty());
  EXPECT_TRUE(scalars(range(5).skip(-1)).empty());
  EXPECT_EQ(range(5).skip(3).cardinality(), 2);
  EXPECT_EQ(range(5).skip(9).cardinality(), 0);
  EXPECT_THAT(scalars(range(10).shard(3, 1)), ElementsAre(1, 4, 7));
  EXPECT_THAT(scalars(range(10).shard(3, 0)), ElementsAre(0, 3, 6, 9));
  EXPECT_EQ(range(10).shard(3, 0).cardinality(), 4);
  EXPECT_EQ(range(10).shard(3, 2).cardinality(), 3);
  EXPECT_EQ(range(1).shard(3, 2).cardinality(), 0);
  EXPECT_THROW(range(3).shard(0, 0), Error);
  EXPECT_THROW(range(3).shard(2, 2), Error);
  EXPECT_THROW(range(3).take(-2), Error);
  // Composition: skip 2, take 5, batch 2 -> [2,3] [4,5] [6].
  std::vector<Element> b = collect(range(20).skip(2).take(5).batch(2));
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[2][0].to_vector<int64_t>(), (std::vector<int64_t>{6}));
  EXPECT_EQ(range(20).skip(2).take(5).batch(2).cardinality(), 3);
}

// ---- prefetch and early destruction ----

TEST(DatasetPrefetch, YieldsTheSameElements) {
  for (int64_t n : {int64_t{1}, int64_t{4}, kAutotune}) {
    std::vector<int64_t> expected(50);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(scalars(range(50).prefetch(n)), expected);
  }
  EXPECT_EQ(range(50).prefetch().cardinality(), 50);
  EXPECT_THROW(range(5).prefetch(0), Error);
}

// The compute pool's idle workers fill a prefetch buffer (runtime::IdleWork) while the
// consumer is busy elsewhere; the prefetch thread only steps in when the buffer is empty.
TEST(DatasetPrefetch, IdlePoolWorkersProduceTheElements) {
  if (runtime::ThreadPool::global().num_threads() < 2) {
    GTEST_SKIP() << "the compute pool has no workers on a machine with one core";
  }
  std::atomic<int> on_worker{0};
  Dataset ds = range(40)
                   .map([&](Element e) {
                     if (runtime::ThreadPool::on_worker()) on_worker.fetch_add(1);
                     return e;
                   })
                   .prefetch(2);
  Iterator it = ds.begin_epoch();
  std::vector<int64_t> got;
  while (std::optional<Element> e = it.next()) {
    got.push_back((*e)[0].item<int64_t>());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the consumer's "step"
  }
  std::vector<int64_t> expected(40);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(got, expected);
  EXPECT_GT(on_worker.load(), 0);
}

// A pool worker never waits for the pipeline's own threads: behind a parallel map, the
// prefetch thread alone reads.
TEST(DatasetPrefetch, InputWithThreadsIsReadByThePrefetchThreadOnly) {
  std::atomic<int> on_worker{0};
  Dataset ds = range(40)
                   .map([](Element e) { return e; }, 2)
                   .map([&](Element e) {
                     if (runtime::ThreadPool::on_worker()) on_worker.fetch_add(1);
                     return e;
                   })
                   .prefetch(2);
  Iterator it = ds.begin_epoch();
  int64_t n = 0;
  while (it.next()) {
    ++n;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(n, 40);
  EXPECT_EQ(on_worker.load(), 0);
}

// Prefetch iterators that pool workers fill, destroyed at every point of an epoch while
// another thread keeps the pool busy with parallel_for (a training step's kernels): no hang,
// every element in order, and nothing runs once the iterators are gone.
TEST(DatasetPrefetch, PooledIteratorsComeAndGoWhileThePoolComputes) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> sums{0};
  std::thread step([&] {
    while (!stop) {
      std::atomic<int64_t> sum{0};
      runtime::parallel_for(4096, 256, [&](int64_t b, int64_t e) {
        int64_t local = 0;
        for (int64_t i = b; i < e; ++i) local += i;
        sum += local;
      });
      if (sum.load() == 4096 * 4095 / 2) sums.fetch_add(1);
    }
  });
  std::atomic<int64_t> calls{0};
  Dataset ds = range(300)
                   .map([&](Element e) {
                     ++calls;
                     if (e[0].item<int64_t>() % 4 == 0) jitter(1);  // ~0.4 ms
                     return e;
                   })
                   .batch(4)
                   .prefetch(3);
  for (int round = 0; round < 100; ++round) {
    Iterator it = ds.begin_epoch(round);
    for (int64_t i = 0; i < round % 8; ++i) {
      std::optional<Element> batch = it.next();
      ASSERT_TRUE(batch.has_value());
      EXPECT_EQ((*batch)[0].to_vector<int64_t>()[0], 4 * i) << "round " << round;
    }
  }
  const int64_t after = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(calls.load(), after);
  stop = true;
  step.join();
  EXPECT_GT(sums.load(), 0);
}

// An error raised while a pool worker produces reaches the consumer at its position.
TEST(DatasetPrefetch, ErrorFromAPoolWorkerReachesTheConsumerInOrder) {
  for (int round = 0; round < 20; ++round) {
    Iterator it = range(10)
                      .map([](Element e) {
                        if (e[0].item<int64_t>() == 6) throw Error(ErrorCode::kInternal, "six");
                        return e;
                      })
                      .prefetch(3)
                      .begin_epoch();
    for (int64_t i = 0; i < 6; ++i) {
      std::optional<Element> e = it.next();
      ASSERT_TRUE(e.has_value());
      EXPECT_EQ((*e)[0].item<int64_t>(), i);
      if (round % 2) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    EXPECT_THAT(test_values::thrown_error([&] { it.next(); }).what(), HasSubstr("six"));
  }
}

TEST(DatasetThreads, IteratorsDestroyedMidEpochStopTheirThreads) {
  std::atomic<int64_t> calls = 0;
  auto slow = [&](Element e) {
    ++calls;
    jitter(e[0].item<int64_t>() % 5);
    return e;
  };
  Dataset ds =
      range(1000).map(slow, 4).prefetch(3).map(slow, 2, /*deterministic=*/false).prefetch(2);
  for (int round = 0; round < 200; ++round) {
    Iterator it = ds.begin_epoch(round);
    for (int i = 0; i < round % 6; ++i) ASSERT_TRUE(it.next().has_value());
  }
  // Every thread is gone: no function runs any more.
  int64_t after = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(calls.load(), after);
}

TEST(DatasetThreads, ThreadsAreBoundedAheadOfTheConsumer) {
  std::atomic<int64_t> calls = 0;
  Dataset ds = range(10000)
                   .map(
                       [&](Element e) {
                         ++calls;
                         return e;
                       },
                       2)
                   .prefetch(4);
  Iterator it = ds.begin_epoch();
  ASSERT_TRUE(it.next().has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // 1 consumed + 4 prefetched + the map's window (chunks of at most 128 elements, two per
  // thread) twice (the results handed to the consumer, and as many being made), not 10000.
  EXPECT_LE(calls.load(), 1 + 4 + 2 * (2 * 2 * 128));
}

TEST(DatasetThreads, MovedIteratorsKeepWorking) {
  Iterator it = range(5).map([](Element e) { return e; }, 2).prefetch(2).begin_epoch();
  ASSERT_TRUE(it.next().has_value());
  Iterator moved = std::move(it);
  EXPECT_EQ((*moved.next())[0].item<int64_t>(), 1);
  it = std::move(moved);
  EXPECT_EQ((*it.next())[0].item<int64_t>(), 2);
}

TEST(DatasetThreads, IteratorOutlivesItsDataset) {
  Iterator it;
  {
    Dataset ds = range(4).map([](Element e) { return times(std::move(e), 2); }, 2).prefetch(1);
    it = ds.begin_epoch();
  }
  std::vector<int64_t> got;
  while (std::optional<Element> e = it.next()) got.push_back((*e)[0].item<int64_t>());
  EXPECT_THAT(got, ElementsAre(0, 2, 4, 6));
}

// ---- cache ----

TEST(DatasetCache, InMemoryAfterTheFirstCompleteEpoch) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  Dataset ds = range(5)
                   .map([calls](Element e) {
                     ++*calls;
                     return times(std::move(e), 2);
                   })
                   .cache();
  // An epoch stopped early keeps nothing.
  {
    Iterator it = ds.begin_epoch(0);
    it.next();
    it.next();
  }
  EXPECT_EQ(calls->load(), 2);
  EXPECT_THAT(scalars(ds, 0), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_EQ(calls->load(), 7);
  EXPECT_THAT(scalars(ds, 1), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_EQ(scalars(ds.shuffle(5, 1), 2).size(), 5u);
  EXPECT_EQ(calls->load(), 7);
}

using DatasetCacheFile = DatasetFiles;

// range(5) doubled, counting evaluations, cached in `file`.
Dataset counted_pipeline(const std::string& file, std::shared_ptr<std::atomic<int>> calls,
                         int64_t n = 5) {
  return range(n)
      .map([calls](Element e) {
        ++*calls;
        return Element{Tensor::scalar(e[0].item<int64_t>() * 2),
                       Tensor::from_list<float>({0.5f, 1.5f}, {1, 2})};
      })
      .cache(file);
}

TEST_F(DatasetCacheFile, SecondEpochAndSecondRunReadTheFile) {
  std::string file = path("sub/cache.tfrecord");
  auto calls = std::make_shared<std::atomic<int>>(0);
  Dataset ds = counted_pipeline(file, calls);
  EXPECT_THAT(scalars(ds, 0), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_EQ(calls->load(), 5);
  ASSERT_TRUE(fs::exists(file));
  std::vector<Element> again = collect(ds, 1);
  EXPECT_EQ(calls->load(), 5);
  ASSERT_EQ(again.size(), 5u);
  EXPECT_EQ(again[4][0].item<int64_t>(), 8);
  EXPECT_EQ(again[4][1].shape(), (Shape{1, 2}));
  EXPECT_EQ(again[4][1].to_vector<float>(), (std::vector<float>{0.5f, 1.5f}));

  // The next run of the program: a new pipeline, same description.
  auto calls2 = std::make_shared<std::atomic<int>>(0);
  EXPECT_THAT(scalars(counted_pipeline(file, calls2).batch(2).map([](Element e) {
                return Element{Tensor::scalar(e[0].to_vector<int64_t>()[0])};
              })),
              ElementsAre(0, 4, 8));
  EXPECT_EQ(calls2->load(), 0);
}

TEST_F(DatasetCacheFile, AnIncompleteEpochLeavesNoFile) {
  std::string file = path("cache.tfrecord");
  auto calls = std::make_shared<std::atomic<int>>(0);
  Dataset ds = counted_pipeline(file, calls);
  {
    Iterator it = ds.begin_epoch();
    it.next();
    it.next();
  }
  EXPECT_TRUE(files().empty());
  // An upstream error also leaves nothing.
  Dataset failing = range(5).map(fail_at(3)).cache(file);
  EXPECT_THROW(collect(failing), Error);
  EXPECT_TRUE(files().empty());
  EXPECT_THAT(scalars(ds), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_THAT(files(), ElementsAre("cache.tfrecord"));
}

TEST_F(DatasetCacheFile, StaleFileIsRebuilt) {
  std::string file = path("cache.tfrecord");
  auto calls = std::make_shared<std::atomic<int>>(0);
  EXPECT_THAT(scalars(counted_pipeline(file, calls, 5)), ElementsAre(0, 2, 4, 6, 8));
  // Another pipeline (a different source tensor): its fingerprint differs.
  EXPECT_THAT(scalars(counted_pipeline(file, calls, 3)), ElementsAre(0, 2, 4));
  EXPECT_EQ(calls->load(), 8);
  EXPECT_THAT(scalars(counted_pipeline(file, calls, 3)), ElementsAre(0, 2, 4));
  EXPECT_EQ(calls->load(), 8);
  // A changed parameter downstream of the source counts too.
  EXPECT_EQ(scalars(range(6).take(3).cache(file)).size(), 3u);
  EXPECT_THAT(scalars(counted_pipeline(file, calls, 3)), ElementsAre(0, 2, 4));
  EXPECT_EQ(calls->load(), 11);
}

TEST_F(DatasetCacheFile, CorruptFileIsRebuilt) {
  std::string file = path("cache.tfrecord");
  auto calls = std::make_shared<std::atomic<int>>(0);
  EXPECT_THAT(scalars(counted_pipeline(file, calls)), ElementsAre(0, 2, 4, 6, 8));
  std::string bytes = read_file(file);
  std::string flipped = bytes;
  flipped[flipped.size() - 30] ^= 0x10;  // inside the last element's record
  write_file("cache.tfrecord", flipped);
  EXPECT_THAT(scalars(counted_pipeline(file, calls)), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_EQ(calls->load(), 10);
  EXPECT_EQ(read_file(file), bytes);  // rebuilt identically
  EXPECT_THAT(scalars(counted_pipeline(file, calls)), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_EQ(calls->load(), 10);

  // Truncated after a whole record: the footer (12 + 9 + 4 bytes) is missing.
  write_file("cache.tfrecord", bytes.substr(0, bytes.size() - 25));
  Dataset ds = counted_pipeline(file, calls);
  EXPECT_THAT(scalars(ds), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_EQ(calls->load(), 15);
  // Garbage.
  write_file("cache.tfrecord", "not a cache file");
  EXPECT_THAT(scalars(ds, 1), ElementsAre(0, 2, 4, 6, 8));
  EXPECT_EQ(calls->load(), 20);
  EXPECT_THAT(files(), ElementsAre("cache.tfrecord"));
}

TEST_F(DatasetCacheFile, CacheFileHoldsTFRecords) {
  std::string file = path("cache.tfrecord");
  collect(range(3).cache(file));
  std::vector<std::string> records = io::read_records(file);
  ASSERT_EQ(records.size(), 5u);  // header, 3 elements, footer
  EXPECT_THAT(records[0], HasSubstr("from_tensors(i64[3]"));
}

// ---- file sources ----

using DatasetSources = DatasetFiles;

std::vector<std::string> strings(const Dataset& ds) {
  std::vector<std::string> out;
  for (const Element& e : collect(ds)) out.push_back(as_string(e[0]));
  return out;
}

TEST_F(DatasetSources, TFRecordFilesSequentialAndInterleaved) {
  std::string a = write_records("a.tfrecord", {"a0", "a1", "a2"});
  std::string b = write_records("b.tfrecord", {"b0", "b1"});
  std::string c = write_records("c.tfrecord", {"c0"});
  Dataset seq = Dataset::tfrecord({a, b});
  EXPECT_THAT(strings(seq), ElementsAre("a0", "a1", "a2", "b0", "b1"));
  EXPECT_EQ(seq.cardinality(), kUnknownCardinality);
  std::vector<Element> e = collect(seq);
  EXPECT_EQ(e[0][0].dtype(), u8);
  EXPECT_EQ(e[0][0].shape(), (Shape{2}));
  EXPECT_THAT(strings(Dataset::tfrecord({a, b}, io::Compression::kNone, {2, 1})),
              ElementsAre("a0", "b0", "a1", "b1", "a2"));
  EXPECT_THAT(strings(Dataset::tfrecord({a, b}, io::Compression::kNone, {2, 2})),
              ElementsAre("a0", "a1", "b0", "b1", "a2"));
  // When b ends, c takes its place in the cycle.
  EXPECT_THAT(strings(Dataset::tfrecord({a, b, c}, io::Compression::kNone, {2, 1})),
              ElementsAre("a0", "b0", "a1", "b1", "a2", "c0"));
  EXPECT_THAT(strings(Dataset::tfrecord({a, b, c}, io::Compression::kNone, {8, 1})),
              ElementsAre("a0", "b0", "c0", "a1", "b1", "a2"));
  EXPECT_TRUE(strings(Dataset::tfrecord({})).empty());
  EXPECT_THROW(Dataset::tfrecord({a}, io::Compression::kNone, {0, 1}), Error);
}

TEST_F(DatasetSources, TFRecordGzipAndEmptyRecords) {
  std::string g = write_records("g.tfrecord.gz", {"x", "", "yz"}, io::Compression::kGzip);
  std::vector<Element> e = collect(Dataset::tfrecord({g}, io::Compression::kGzip));
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[1][0].shape(), (Shape{0}));
  EXPECT_EQ(as_string(e[2][0]), "yz");
}

TEST_F(DatasetSources, TFRecordErrorsArriveAtNext) {
  std::string a = write_records("a.tfrecord", {"a0", "a1"});
  Dataset ds = Dataset::tfrecord({a, path("missing.tfrecord")}).map([](Element e) { return e; }, 2);
  Iterator it = ds.begin_epoch();
  EXPECT_TRUE(it.next().has_value());
  EXPECT_TRUE(it.next().has_value());
  try {
    it.next();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_THAT(e.what(), HasSubstr("missing.tfrecord"));
  }
  // A corrupt record names the file.
  std::string bytes = read_file(a);
  bytes[bytes.size() - 6] ^= 1;
  std::string bad = write_file("bad.tfrecord", bytes);
  try {
    collect(Dataset::tfrecord({bad}).prefetch(1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_THAT(e.what(), HasSubstr("bad.tfrecord"));
  }
}

TEST_F(DatasetSources, TextLines) {
  std::string a = write_file("a.txt", "hello\nworld\r\n\nlast");
  std::string b = write_file("b.txt", "b1\n");
  std::string empty = write_file("empty.txt", "");
  EXPECT_THAT(strings(Dataset::text_lines({a, empty, b})),
              ElementsAre("hello", "world", "", "last", "b1"));
  EXPECT_THROW(collect(Dataset::text_lines({path("nope.txt")})), Error);
}

TEST_F(DatasetSources, CsvColumnsDefaultsAndHeader) {
  std::string f = write_file("d.csv",
                             "x,count,label\n"
                             "1.5,10,3\n"
                             "\n"
                             " -2e1 , ,-7\r\n"
                             "+.25,9223372036854775807,\n");
  CsvOptions options;
  options.columns = {{f32, std::nullopt, "x"}, {i64, -1.0, "count"}, {i32, 42.0, "label"}};
  options.header = true;
  std::vector<Element> e = collect(Dataset::csv({f}, options));
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0][0].dtype(), f32);
  EXPECT_EQ(e[0][0].shape(), Shape{});
  EXPECT_EQ(e[0][0].item<float>(), 1.5f);
  EXPECT_EQ(e[0][1].dtype(), i64);
  EXPECT_EQ(e[0][1].item<int64_t>(), 10);
  EXPECT_EQ(e[0][2].dtype(), i32);
  EXPECT_EQ(e[0][2].item<int32_t>(), 3);
  EXPECT_EQ(e[1][0].item<float>(), -20.0f);
  EXPECT_EQ(e[1][1].item<int64_t>(), -1);  // default
  EXPECT_EQ(e[1][2].item<int32_t>(), -7);
  EXPECT_EQ(e[2][0].item<float>(), 0.25f);
  EXPECT_EQ(e[2][1].item<int64_t>(), INT64_MAX);
  EXPECT_EQ(e[2][2].item<int32_t>(), 42);

  std::string tabs = write_file("t.tsv", "1\t2\n3\t4\n");
  CsvOptions tsv;
  tsv.columns = {{i32}, {i32}};
  tsv.delimiter = '\t';
  std::vector<Element> t = collect(Dataset::csv({tabs, tabs}, tsv).batch(4));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0][1].to_vector<int32_t>(), (std::vector<int32_t>{2, 4, 2, 4}));
}

TEST_F(DatasetSources, CsvErrorsNameFileLineAndColumn) {
  CsvOptions options;
  options.columns = {{f32}, {i64, std::nullopt, "label"}};
  auto error_of = [&](const std::string& text) -> std::string {
    std::string f = write_file("e.csv", text);
    try {
      collect(Dataset::csv({f}, options));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("e.csv"));
      return e.what();
    }
    ADD_FAILURE() << "no error for " << text;
    return "";
  };
  std::string m = error_of("1,2\n3,4\n5,x7\n");
  EXPECT_THAT(m, HasSubstr("line 3, column 2 (\"label\")"));
  EXPECT_THAT(m, HasSubstr("cannot parse \"x7\" as i64"));
  EXPECT_THAT(error_of("1,2\n1.5.5,3\n"), HasSubstr("line 2, column 1"));
  EXPECT_THAT(error_of("1,2,3\n"), HasSubstr("line 1: expected 2 fields, found 3"));
  EXPECT_THAT(error_of("1\n"), HasSubstr("expected 2 fields, found 1"));
  EXPECT_THAT(error_of("1,\n"), HasSubstr("empty field and no default"));
  EXPECT_THAT(error_of("1,99999999999999999999\n"), HasSubstr("out of range"));
  EXPECT_THAT(error_of("1e99,1\n"), HasSubstr("out of range"));
  options.columns = {{i32}};
  EXPECT_THAT(error_of("3000000000\n"), HasSubstr("out of range"));

  // Errors in the options come at once.
  CsvOptions bad;
  EXPECT_THROW(Dataset::csv({"x.csv"}, bad), Error);
  bad.columns = {{u8}};
  EXPECT_THROW(Dataset::csv({"x.csv"}, bad), Error);
  bad.columns = {{i32, 0.5}};
  EXPECT_THROW(Dataset::csv({"x.csv"}, bad), Error);
  bad.columns = {{i32, 3e9}};
  EXPECT_THROW(Dataset::csv({"x.csv"}, bad), Error);
  options.columns = {{f32}};
  try {
    collect(Dataset::csv({path("none.csv")}, options));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

TEST_F(DatasetSources, CsvErrorThroughParallelMapAndPrefetch) {
  std::string f = write_file("p.csv", "1\n2\n3\nfour\n5\n");
  CsvOptions options;
  options.columns = {{i64}};
  Dataset ds = Dataset::csv({f}, options).map([](Element e) { return e; }, 3).prefetch(2);
  Iterator it = ds.begin_epoch();
  for (int64_t v = 1; v <= 3; ++v) EXPECT_EQ((*it.next())[0].item<int64_t>(), v);
  try {
    it.next();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("p.csv line 4, column 1"));
  }
  EXPECT_FALSE(it.next().has_value());
}

TEST_F(DatasetSources, FromIdx) {
  write_idx(path("img.idx"), Tensor::from_list<uint8_t>({1, 2, 3, 4, 5, 6}, {3, 2}), false);
  write_idx(path("lab.idx"), Tensor::from_list<uint8_t>({7, 8, 9}), true);
  std::vector<Element> e = collect(Dataset::from_idx(path("img.idx"), path("lab.idx")));
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[2][0].to_vector<int32_t>(), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(e[2][1].item<int32_t>(), 9);
  write_idx(path("short.idx"), Tensor::from_list<uint8_t>({7, 8}), false);
  try {
    Dataset::from_idx(path("img.idx"), path("short.idx"));
    FAIL();
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), HasSubstr("short.idx"));
  }
}

TEST(DatasetBatch, AHugeBatchSizeTakesWhatThereIsWithoutReservingIt) {
  Dataset ds =
      Dataset::from_tensors({Tensor::from_list<int32_t>({1, 2, 3})}).batch(int64_t{1} << 40);
  Iterator it = ds.begin_epoch();
  std::optional<Element> batch = it.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ((*batch)[0].to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(it.next().has_value());
}

}  // namespace
}  // namespace kiln::data

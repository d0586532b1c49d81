// Buffer donation (compiler/executable.h: Donation, run_donating): outputs written in place
// into fed buffers or copied after the old value's last reader, refused for shared buffers,
// and compile errors naming the feed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "compiler/compile_cache.h"
#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/mlp_step.h"
#include "tests/testing/values.h"

namespace kiln::compiler {
namespace {

using test_values::error_of;

using testing::bitwise_equal;
using ::testing::HasSubstr;

Tensor iota(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i);
  return Tensor::from_vector(v, {n});
}

// Feeds holding the only handle to `value` (a braced list's backing array would hold another
// until the end of the full expression).
FeedList lend(const Tensor& key, Tensor value, const Tensor& key2 = {}, Tensor value2 = {}) {
  FeedList f;
  f.emplace_back(key, std::move(value));
  if (key2.defined()) f.emplace_back(key2, std::move(value2));
  return f;
}

// w - 0.5 * g, donated into w: a fused elementwise kernel whose input w dies there.
struct SgdGraph {
  Graph g{"sgd"};
  Tensor w = g.placeholder(f32, {256}, "w");
  Tensor grad = g.placeholder(f32, {256}, "grad");
  Tensor new_w = w - grad * 0.5;
};

TEST(Donation, ElementwiseUpdateIsWrittenInPlace) {
  SgdGraph s;
  Tensor grad = iota(256, 1.0f);
  Executable exe = compile(s.g, {s.new_w}, {{s.w, iota(256, 0)}, {s.grad, grad}}, {{s.w, 0}});
  MemoryStats m = exe.memory_stats();
  EXPECT_EQ(m.num_donations, 1);
  EXPECT_EQ(m.num_donated_in_place, 1);
  EXPECT_EQ(m.num_donated_copied, 0);
  EXPECT_EQ(m.donated_output_bytes, 256 * 4);
  EXPECT_EQ(m.outside_bytes_donating(), m.outside_bytes() - 256 * 4);
  Tensor w = iota(256, 2.0f);
  const void* data = w.raw_data();
  for (int step = 1; step <= 3; ++step) {
    FeedList feeds{{s.w, std::move(w)}, {s.grad, grad}};
    std::vector<Tensor> out = exe.run_donating(std::move(feeds));
    w = out[0];
    out.clear();
    EXPECT_EQ(w.raw_data(), data) << "step " << step;
    auto v = w.data<float>();
    for (int i = 0; i < 256; ++i) ASSERT_EQ(v[i], 2.0f * i - 0.5f * step * i) << i;
  }
  DonationStats d = exe.donation_stats();
  EXPECT_EQ(d.written_in_place, 3);
  EXPECT_EQ(d.copied, 0);
  EXPECT_EQ(d.refused, 0);
  // run() never overwrites a feed, even on a donating executable.
  Tensor before = w;
  std::vector<Tensor> out = exe.run({{s.w, w}, {s.grad, grad}});
  EXPECT_NE(out[0].raw_data(), w.raw_data());
  EXPECT_EQ(w.data<float>()[2], before.data<float>()[2]);
  EXPECT_EQ(out[0].data<float>()[2], w.data<float>()[2] - 1.0f);
}

TEST(Donation, OldValueReadAfterTheUpdateIsCopiedAfterItsLastReader) {
  // new_w = w + 1; z = new_w . w (a kernel thunk reading both): w is read after new_w exists.
  Graph g("late_read");
  Tensor w = g.placeholder(f32, {1, 64}, "w");
  Tensor new_w = w + 1.0;
  Tensor z = matmul(new_w, transpose(w, {1, 0}));
  Executable exe = compile(g, {z, new_w}, {{w, zeros({1, 64})}}, {{w, 1}});
  EXPECT_EQ(exe.memory_stats().num_donated_copied, 1);
  EXPECT_EQ(exe.memory_stats().num_donated_in_place, 0);
  std::vector<float> init(64);
  for (int i = 0; i < 64; ++i) init[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  Tensor wt = Tensor::from_vector(init, {1, 64});
  Tensor reference = Tensor::from_vector(init, {1, 64});
  const void* data = wt.raw_data();
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> want = g.run({{w, reference}}, {z, new_w});
    std::vector<Tensor> got = exe.run_donating(lend(w, std::move(wt)));
    EXPECT_EQ(got[1].raw_data(), data);
    EXPECT_TRUE(bitwise_equal(got[0], want[0])) << got[0] << " vs " << want[0];
    EXPECT_TRUE(bitwise_equal(got[1], want[1]));
    // By hand: z = sum((w + 1) * w).
    double sum = 0;
    auto r = reference.data<float>();
    for (int i = 0; i < 64; ++i) sum += (r[i] + 1.0) * r[i];
    EXPECT_NEAR(got[0].item<float>(), sum, 1e-4 * (1 + std::abs(sum)));
    wt = got[1];
    reference = want[1];
  }
  EXPECT_EQ(exe.donation_stats().copied, 3);
}

TEST(Donation, AnUpdateAfterTheLastReadIsWrittenDirectly) {
  // w is read only by the reduction; the new value (computed from the sum) comes later.
  Graph g("after");
  Tensor w = g.placeholder(f32, {32}, "w");
  Tensor total = sum(w);
  Tensor new_w = zeros_like(w) + total;
  Executable exe = compile(g, {new_w}, {{w, iota(32, 1)}}, {{w, 0}});
  ASSERT_EQ(exe.memory_stats().num_donations, 1);
  EXPECT_EQ(exe.memory_stats().num_donated_copied + exe.memory_stats().num_donated_in_place, 1);
  Tensor wt = iota(32, 1);
  const void* data = wt.raw_data();
  std::vector<Tensor> out = exe.run_donating(lend(w, std::move(wt)));
  EXPECT_EQ(out[0].raw_data(), data);
  for (float x : out[0].to_vector<float>()) EXPECT_EQ(x, 496.0f);  // 0 + 1 + ... + 31
}

TEST(Donation, AViewOfTheOldValueKeepsTheOldValue) {
  // reshape returns a view of its input: the view of w must not change when w is updated.
  Graph g("view");
  Tensor w = g.placeholder(f32, {64}, "w");
  Tensor new_w = w * 2.0;
  Tensor z = matmul(reshape(w, {8, 8}), reshape(new_w, {8, 8}));
  Executable exe = compile(g, {z, new_w}, {{w, iota(64, 1)}}, {{w, 1}});
  Tensor wt = iota(64, 0.125f);
  std::vector<Tensor> want = exe.run({{w, wt}});
  const void* data = wt.raw_data();
  std::vector<Tensor> got = exe.run_donating(lend(w, std::move(wt)));
  EXPECT_EQ(got[1].raw_data(), data);
  EXPECT_TRUE(bitwise_equal(got[0], want[0])) << got[0] << " vs " << want[0];
  EXPECT_TRUE(bitwise_equal(got[1], want[1]));
  // By hand: z[0][0] = sum_k w[k] * 2 w[8k] with w[i] = i / 8.
  double z00 = 0;
  for (int k = 0; k < 8; ++k) z00 += (k * 0.125) * (2 * 8 * k * 0.125);
  EXPECT_FLOAT_EQ(got[0].to_vector<float>()[0], static_cast<float>(z00));
}

TEST(Donation, ASharedBufferIsNotOverwritten) {
  SgdGraph s;
  Tensor grad = iota(256, 1.0f);
  Executable exe = compile(s.g, {s.new_w}, {{s.w, iota(256, 0)}, {s.grad, grad}}, {{s.w, 0}});
  // A second handle (a copy the caller kept): the run refuses, the copy keeps its value.
  Tensor w = iota(256, 2.0f);
  Tensor kept = w;
  FeedList feeds = lend(s.w, std::move(w), s.grad, grad);
  std::vector<Tensor> out = exe.run_donating(std::move(feeds));
  EXPECT_NE(out[0].raw_data(), kept.raw_data());
  EXPECT_EQ(kept.data<float>()[3], 6.0f);
  EXPECT_EQ(out[0].data<float>()[3], 4.5f);
  EXPECT_EQ(exe.donation_stats().refused, 1);
  // The refused tensor goes back to the caller's entry.
  ASSERT_TRUE(feeds[0].second.defined());
  EXPECT_EQ(feeds[0].second.raw_data(), kept.raw_data());
  // A view over the same storage (reshape) counts too.
  Tensor w2 = iota(256, 2.0f);
  Tensor view = reshape(w2, {16, 16});
  if (view.raw_data() == w2.raw_data()) {
    out = exe.run_donating(lend(s.w, std::move(w2), s.grad, grad));
    EXPECT_NE(out[0].raw_data(), view.raw_data());
    EXPECT_EQ(view.data<float>()[3], 6.0f);
    EXPECT_EQ(exe.donation_stats().refused, 2);
  }
  // The same tensor fed as both inputs: two handles, refused; results as without donation.
  Tensor both = iota(256, 1.0f);
  out = exe.run_donating(lend(s.w, both, s.grad, both));
  EXPECT_EQ(both.data<float>()[4], 4.0f);
  EXPECT_EQ(out[0].data<float>()[4], 2.0f);
  EXPECT_EQ(exe.donation_stats().written_in_place, 0);
}

TEST(Donation, AFetchedOldValueIsNeverOverwritten) {
  SgdGraph s;
  Tensor grad = iota(256, 1.0f);
  // The old value is also an output: donating would change what the caller gets.
  Executable exe = compile(s.g, {s.new_w, s.w}, {{s.w, iota(256, 0)}, {s.grad, grad}}, {{s.w, 0}});
  EXPECT_EQ(exe.memory_stats().num_donations_never, 1);
  std::vector<Tensor> out = exe.run_donating(lend(s.w, iota(256, 2.0f), s.grad, grad));
  EXPECT_EQ(out[1].data<float>()[5], 10.0f);
  EXPECT_EQ(out[0].data<float>()[5], 7.5f);
  EXPECT_EQ(exe.donation_stats().refused, 1);
  // The output is the feed itself (an identity update): returned as the same buffer.
  Executable same = compile(s.g, {s.w}, {{s.w, iota(256, 0)}}, {{s.w, 0}});
  EXPECT_EQ(same.memory_stats().num_donated_in_place, 1);
  Tensor w = iota(256, 1.0f);
  const void* data = w.raw_data();
  out = same.run_donating(lend(s.w, std::move(w)));
  EXPECT_EQ(out[0].raw_data(), data);
}

TEST(Donation, ErrorsNameTheFeed) {
  SgdGraph s;
  FeedList feeds{{s.w, iota(256, 0)}, {s.grad, iota(256, 0)}};
  std::string twice = error_of([&] {
    compile(s.g, {s.new_w, s.new_w * 2.0}, feeds, {{s.w, 0}, {s.w, 1}});
  });
  EXPECT_THAT(twice, HasSubstr("feed 'w'"));
  EXPECT_THAT(twice, HasSubstr("donated twice"));
  std::string output_twice = error_of([&] {
    compile(s.g, {s.new_w}, feeds, {{s.w, 0}, {s.grad, 0}});
  });
  EXPECT_THAT(output_twice, HasSubstr("feed 'grad'"));
  EXPECT_THAT(output_twice, HasSubstr("already donated to feed 'w'"));
  std::string shape = error_of([&] { compile(s.g, {sum(s.new_w)}, feeds, {{s.w, 0}}); });
  EXPECT_THAT(shape, HasSubstr("feed 'w'"));
  EXPECT_THAT(shape, HasSubstr("f32[256]"));
  EXPECT_THAT(shape, HasSubstr("f32[]"));
  std::string dtype = error_of([&] { compile(s.g, {convert(s.new_w, f64)}, feeds, {{s.w, 0}}); });
  EXPECT_THAT(dtype, HasSubstr("feed 'w'"));
  EXPECT_THAT(dtype, HasSubstr("same dtype and shape"));
  std::string range = error_of([&] { compile(s.g, {s.new_w}, feeds, {{s.w, 3}}); });
  EXPECT_THAT(range, HasSubstr("feed 'w' names output 3, but there are 1 outputs"));
  std::string not_placeholder = error_of([&] { compile(s.g, {s.new_w}, feeds, {{s.new_w, 0}}); });
  EXPECT_THAT(not_placeholder, HasSubstr("not a placeholder of graph 'sgd'"));
}

TEST(Donation, FailedRunGivesTheFeedsBack) {
  SgdGraph s;
  Executable exe =
      compile(s.g, {s.new_w}, {{s.w, iota(256, 0)}, {s.grad, iota(256, 0)}}, {{s.w, 0}});
  FeedList feeds{{s.w, iota(256, 1.0f)}};  // grad missing
  EXPECT_THROW(exe.run_donating(std::move(feeds)), Error);
  ASSERT_TRUE(feeds[0].second.defined());
  EXPECT_EQ(feeds[0].second.data<float>()[7], 7.0f);
}

TEST(Donation, CompileCacheKeysOnDonations) {
  SgdGraph s;
  FeedList feeds{{s.w, iota(256, 0)}, {s.grad, iota(256, 1)}};
  CompileCache cache;
  auto plain = cache.get(s.g, {s.new_w}, feeds);
  auto donating = cache.get(s.g, {s.new_w}, feeds, {{s.w, 0}});
  EXPECT_NE(plain, donating);
  EXPECT_EQ(cache.get(s.g, {s.new_w}, feeds, {{s.w, 0}}), donating);
  EXPECT_EQ(plain->memory_stats().num_donations, 0);
  EXPECT_EQ(donating->memory_stats().num_donations, 1);
  EXPECT_EQ(cache.stats().misses, 2);
  EXPECT_EQ(cache.stats().hits, 1);
}

// Each update reads the other weight: ordering every feed's readers before its writer would
// need both writers first. The second ordering is skipped (no cycle); one update is copied.
TEST(Donation, CrossReadingUpdatesNeedNoImpossibleOrder) {
  Graph g("cross");
  Tensor w1 = g.placeholder(f32, {4, 4}, "w1");
  Tensor w2 = g.placeholder(f32, {4, 4}, "w2");
  Tensor new1 = matmul(w1, w2);
  Tensor new2 = matmul(w2, w1);
  Tensor a = Tensor::from_vector(std::vector<float>(16, 0.5f), {4, 4});
  Tensor b = reshape(iota(16, 0.125f), {4, 4});
  Executable exe = compile(g, {new1, new2}, {{w1, a}, {w2, b}}, {{w1, 0}, {w2, 1}});
  EXPECT_EQ(exe.memory_stats().num_donations, 2);
  Tensor r1 = a.to(f32), r2 = b.to(f32);  // references, never lent
  Tensor t1 = a.to(f64).to(f32), t2 = b.to(f64).to(f32);
  for (int step = 0; step < 2; ++step) {
    std::vector<Tensor> want = g.run({{w1, r1}, {w2, r2}}, {new1, new2});
    std::vector<Tensor> got = exe.run_donating(lend(w1, std::move(t1), w2, std::move(t2)));
    EXPECT_EQ(got[0].to_vector<float>(), want[0].to_vector<float>());
    EXPECT_EQ(got[1].to_vector<float>(), want[1].to_vector<float>());
    t1 = got[0];
    t2 = got[1];
    r1 = want[0];
    r2 = want[1];
  }
}

// The MLP train step (Adam) with every parameter and slot donated: every update written in
// place, bit-identical to the same executable without donation, buffers reused across steps,
// and the arena no larger.
TEST(Donation, MlpTrainStepMatchesUndonatedRuns) {
  test_models::MlpStep s = test_models::make_mlp_step(20, 16, 4, 8);
  std::vector<Donation> donations;
  for (int i = 0; i < 12; ++i) donations.push_back({s.feeds[5 + i].first, 1 + i});
  Executable plain = compile(s.graph, s.fetches, s.feeds);
  Executable donating = compile(s.graph, s.fetches, s.feeds, donations);
  MemoryStats m = donating.memory_stats();
  EXPECT_EQ(m.num_donations, 12);
  // All in place: the schedule runs each weight's other readers (the backward pass's
  // dx = dz . w^T) before its update.
  EXPECT_EQ(m.num_donated_in_place, 12);
  EXPECT_EQ(m.num_donated_copied, 0);
  EXPECT_LE(m.arena_bytes, plain.memory_stats().arena_bytes);

  FeedList reference = s.feeds, state;
  for (const auto& [key, value] : s.feeds) {  // private copies the run may overwrite
    Tensor copy = Tensor::empty(value.dtype(), value.shape());
    std::memcpy(copy.raw_mutable_data(), value.raw_data(), value.nbytes());
    state.push_back({key, copy});
  }
  std::vector<const void*> data;
  for (int i = 0; i < 12; ++i) data.push_back(state[5 + i].second.raw_data());
  for (int step = 0; step < 4; ++step) {
    std::vector<Tensor> want = plain.run(reference);
    FeedList feeds;
    for (size_t j = 0; j < state.size(); ++j)
      feeds.push_back({state[j].first, j >= 5 ? std::move(state[j].second) : state[j].second});
    std::vector<Tensor> got = donating.run_donating(std::move(feeds));
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_TRUE(bitwise_equal(got[k], want[k])) << "step " << step << " output " << k;
    for (int i = 0; i < 12; ++i) {
      reference[5 + i].second = want[1 + i];
      state[5 + i].second = got[1 + i];
    }
    got.clear();
    for (int i = 0; i < 12; ++i)
      EXPECT_EQ(state[5 + i].second.raw_data(), data[i]) << "step " << step << " buffer " << i;
  }
  DonationStats d = donating.donation_stats();
  EXPECT_EQ(d.written_in_place + d.copied, 4 * 12);
  EXPECT_EQ(d.refused, 0);
}

}  // namespace
}  // namespace kiln::compiler

// Buffer donation on the MLP train step (784-128-10, dropout, Adam; tests/compiler/mlp_step.h):
// the step with fresh output buffers for the new weights and slots (run, the path before
// donation) against the same step writing them into the fed buffers (run_donating), timed in
// interleaved rounds at batch 64 and 1024, with both memory plans.
#include <cstdio>
#include <cstring>

#include "benchmarks/bench_util.h"
#include "compiler/executable.h"
#include "tests/compiler/mlp_step.h"

namespace {

using namespace kiln;

constexpr int kFirstState = 5;  // feeds: x, seed, lr, iteration, y, then 12 weights and slots
constexpr int kStates = 12;     // fetches: loss, then the 12 new values

Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.dtype(), t.shape());
  std::memcpy(c.raw_mutable_data(), t.raw_data(), t.nbytes());
  return c;
}

void print_stats(const char* what, const compiler::MemoryStats& m) {
  std::printf(
      "  %-9s arena %lld B, outside %lld B (fed %lld, outputs %lld); donations %d: %d in "
      "place, %d copied, %d never\n",
      what, static_cast<long long>(m.arena_bytes), static_cast<long long>(m.outside_bytes()),
      static_cast<long long>(m.fed_bytes), static_cast<long long>(m.output_bytes), m.num_donations,
      m.num_donated_in_place, m.num_donated_copied, m.num_donations_never);
  if (m.num_donations > 0) {
    std::printf("  %-9s outside when donating %lld B (%lld B of outputs go into fed buffers)\n", "",
                static_cast<long long>(m.outside_bytes_donating()),
                static_cast<long long>(m.donated_output_bytes));
  }
}

void bench_step(int64_t batch, int rounds) {
  test_models::MlpStep s = test_models::make_mlp_step(784, 128, 10, batch);
  std::vector<compiler::Donation> donations;
  for (int i = 0; i < kStates; ++i) donations.push_back({s.feeds[kFirstState + i].first, 1 + i});
  compiler::Executable plain = compiler::compile(s.graph, s.fetches, s.feeds);
  compiler::Executable donating = compiler::compile(s.graph, s.fetches, s.feeds, donations);
  FeedList fresh_state, donated_state;
  for (const auto& [key, value] : s.feeds) {
    fresh_state.push_back({key, clone(value)});
    donated_state.push_back({key, clone(value)});
  }
  // The old path: new values in fresh buffers, assigned over the previous ones.
  auto fresh_step = [&] {
    std::vector<Tensor> out = plain.run(fresh_state);
    for (int i = 0; i < kStates; ++i) fresh_state[kFirstState + i].second = std::move(out[1 + i]);
  };
  auto donated_step = [&] {
    FeedList feeds;
    feeds.reserve(donated_state.size());
    for (size_t j = 0; j < donated_state.size(); ++j) {
      feeds.push_back({donated_state[j].first, j >= kFirstState ? std::move(donated_state[j].second)
                                                                : donated_state[j].second});
    }
    std::vector<Tensor> out = donating.run_donating(std::move(feeds));
    for (int i = 0; i < kStates; ++i) donated_state[kFirstState + i].second = std::move(out[1 + i]);
  };
  double best_fresh = 1e9, best_donated = 1e9;
  std::printf("MLP b%lld step, us per step (interleaved rounds; shared machine, noisy):\n",
              static_cast<long long>(batch));
  for (int r = 0; r < rounds; ++r) {
    double f = bench::best_seconds_per_call(fresh_step, 2, 0.2);
    double d = bench::best_seconds_per_call(donated_step, 2, 0.2);
    best_fresh = std::min(best_fresh, f);
    best_donated = std::min(best_donated, d);
    std::printf("  round %d: fresh buffers %.1f, donated %.1f\n", r, f * 1e6, d * 1e6);
  }
  compiler::DonationStats d = donating.donation_stats();
  std::printf(
      "  best: fresh %.1f us, donated %.1f us (%.3fx); runs wrote %lld outputs in place, "
      "copied %lld, refused %lld\n",
      best_fresh * 1e6, best_donated * 1e6, best_fresh / best_donated,
      static_cast<long long>(d.written_in_place), static_cast<long long>(d.copied),
      static_cast<long long>(d.refused));
  print_stats("fresh", plain.memory_stats());
  print_stats("donating", donating.memory_stats());
  std::string key = "mlp_b" + std::to_string(batch) + "_donated_vs_fresh";
  bench::result(key, best_fresh / best_donated);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  bench_step(64, rounds);
  bench_step(1024, rounds);
  return 0;
}

// Kiln's MPI all-reduce (Collective::all_reduce, with its call check and deadline) against a raw
// blocking MPI_Allreduce on the same buffers, f32 sums of 1 KB to 256 MB, alternated call by
// call. Run under mpirun (benchmarks/run.sh starts it with 2 and 4 ranks). Rank 0 prints, per
// size, both medians with their ranges and RESULT allreduce_np<N>_<size>_kiln_vs_mpi: the raw
// call's median time / Kiln's (1 = as fast as MPI; the target is >= 0.9 from 4 MB); and
// allreduce_np<N>_<size>_blocking_vs_start_wait: Kiln's blocking all_reduce / start_all_reduce
// waited for at once (the cost of handing a bucket to the communication thread and back).
// Usage: mpirun -np N allreduce_vs_mpi [max_bytes]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "kiln/distribute/collective.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string size_name(int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + "MB";
  return std::to_string(bytes >> 10) + "KB";
}

// Seconds of one call, every rank starting together; the slowest rank's time.
template <class F>
double timed(F&& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  fn();
  double mine = std::chrono::duration<double>(Clock::now() - start).count(), slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : int64_t{256} << 20;
  {
    std::unique_ptr<kiln::distribute::Collective> comm = kiln::distribute::make_mpi_collective();
    for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
      const int64_t n = bytes / 4;
      std::vector<float> values(n);
      for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>((i + rank) % 17);
      kiln::Tensor x = kiln::Tensor::from_vector<float>(values, {n});
      // Each side writes into its own output: Kiln's result (which Kiln reuses once the
      // previous one is let go), and one buffer for MPI, allocated once.
      kiln::Tensor kiln_out;
      auto kiln_call = [&] { kiln_out = comm->all_reduce(x); };
      // Started and waited for at once: the hand-over to the communication thread and back that
      // every overlapped bucket pays.
      auto async_call = [&] { kiln_out = comm->wait(comm->start_all_reduce(x)); };
      std::vector<float> raw_out(n);
      auto raw_call = [&] {
        MPI_Allreduce(x.raw_data(), raw_out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      };
      // Raw MPI into a fresh tensor each call, as Kiln's result is: the share of the difference
      // that allocating (and first touching) the output explains.
      kiln::Tensor fresh_out;
      auto raw_fresh_call = [&] {
        kiln::Tensor fresh = kiln::Tensor::empty(kiln::DType::f32, {n});
        MPI_Allreduce(x.raw_data(), fresh.raw_mutable_data(), static_cast<int>(n), MPI_FLOAT,
                      MPI_SUM, MPI_COMM_WORLD);
        fresh_out = fresh;
      };
      // Enough calls for a stable median, fewer for the large sizes (each is a second or so).
      const int calls = bytes <= (int64_t{1} << 20) ? 200 : bytes <= (int64_t{16} << 20) ? 30 : 7;
      kiln_call();
      raw_call();
      raw_fresh_call();
      async_call();
      std::vector<double> t_kiln, t_raw, t_fresh, t_async, ratios;
      for (int c = 0; c < calls; ++c) {
        // Alternated, and which side goes first alternates too.
        double a = 0, b = 0;
        if (c % 2 == 0) {
          a = timed(kiln_call);
          b = timed(raw_call);
        } else {
          b = timed(raw_call);
          a = timed(kiln_call);
        }
        t_fresh.push_back(timed(raw_fresh_call));
        t_async.push_back(timed(async_call));
        t_kiln.push_back(a);
        t_raw.push_back(b);
        ratios.push_back(b / a);
      }
      if (rank != 0) continue;
      const double mk = median(t_kiln), mr = median(t_raw);
      std::printf(
          "np %d %6s: kiln %9.1f us [%9.1f, %9.1f]  mpi %9.1f us [%9.1f, %9.1f]  "
          "mpi/kiln %.3f (per pair %.3f..%.3f, %d pairs)  kiln %.2f GB/s  mpi into a fresh "
          "buffer %.1f us  start+wait %.1f us\n",
          size, size_name(bytes).c_str(), mk * 1e6,
          *std::min_element(t_kiln.begin(), t_kiln.end()) * 1e6,
          *std::max_element(t_kiln.begin(), t_kiln.end()) * 1e6, mr * 1e6,
          *std::min_element(t_raw.begin(), t_raw.end()) * 1e6,
          *std::max_element(t_raw.begin(), t_raw.end()) * 1e6, mr / mk,
          *std::min_element(ratios.begin(), ratios.end()),
          *std::max_element(ratios.begin(), ratios.end()), calls, bytes / mk * 1e-9,
          median(t_fresh) * 1e6, median(t_async) * 1e6);
      kiln::bench::result(
          "allreduce_np" + std::to_string(size) + "_" + size_name(bytes) + "_kiln_vs_mpi", mr / mk);
      kiln::bench::result("allreduce_np" + std::to_string(size) + "_" + size_name(bytes) +
                              "_blocking_vs_start_wait",
                          mk / median(t_async));
    }
  }
  MPI_Finalize();
  return 0;
}

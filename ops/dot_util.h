// What dot's reference kernel (ops/linalg.cc) and the compiler's fused_dot share: reading the
// dot's attributes, the layout helpers that map operands onto [B, M, K] x [B, K, N] GEMMs, and
// the GEMMs' blocking across threads (fused_dot must round exactly as dot does, so it must block
// identically).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/shape.h"
#include "runtime/thread_pool.h"

namespace kiln::ops {

inline std::vector<int64_t> ints_or_empty(const Attrs& attrs, const std::string& name) {
  return attrs.has(name) ? attrs.get_ints(name) : std::vector<int64_t>{};
}

// The dimensions of a rank-`rank` operand that are neither batch nor contracting, in order.
inline std::vector<int64_t> free_dims(int64_t rank, const std::vector<int64_t>& batch,
                                      const std::vector<int64_t>& contract) {
  std::vector<int64_t> free;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contract.begin(), contract.end(), d) == contract.end())
      free.push_back(d);
  }
  return free;
}

inline int64_t product(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= shape[d];
  return p;
}

inline std::vector<int64_t> concat(std::initializer_list<const std::vector<int64_t>*> parts) {
  std::vector<int64_t> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// True when reading the dimensions in `order` is reading memory in order (size-1 dimensions
// can go anywhere), so the operand already has that layout.
inline bool is_layout(const Shape& shape, const std::vector<int64_t>& order) {
  int64_t prev = -1;
  for (int64_t d : order) {
    if (shape[d] == 1) continue;
    if (d < prev) return false;
    prev = d;
  }
  return true;
}

// Splits the batch x m output rows of a GEMM with inner size k and n columns into tasks and
// calls fn(batch_index, row_begin, row_end) for each on the thread pool. With at least as many
// batches as pool threads, a task is a whole batch; otherwise each batch's rows are cut into
// one block per thread (at least 16 rows each). Every Eigen call packs its right-hand side
// once, so few large blocks beat many small ones: 64 blocks of 16 rows made a 1024^3 SGEMM
// repack B 64 times and run at 0.78 of Eigen's own parallel product.
template <class F>
void for_each_row_block(int64_t batch, int64_t m, int64_t k, int64_t n, F&& fn) {
  if (batch == 0 || m == 0) return;
  constexpr int64_t kMinRows = 16;
  const int64_t threads = runtime::ThreadPool::global().num_threads();
  int64_t rows = m;
  if (batch < threads) {
    int64_t per_batch = (threads + batch - 1) / batch;  // blocks each batch is cut into
    rows = std::max(kMinRows, (m + per_batch - 1) / per_batch);
    rows = std::min(m, (rows + kMinRows - 1) / kMinRows * kMinRows);
  }
  const int64_t blocks = (m + rows - 1) / rows;
  const int64_t work = std::max<int64_t>(1, rows * k * n);
  runtime::parallel_for(batch * blocks, std::max<int64_t>(1, (1 << 16) / work),
                        [&](int64_t begin, int64_t end) {
                          for (int64_t t = begin; t < end; ++t) {
                            int64_t b = t / blocks, r0 = (t % blocks) * rows;
                            fn(b, r0, std::min(m, r0 + rows));
                          }
                        });
}

// How a GEMM's work is cut across the pool's threads. By default (kRows, for_each_row_block)
// each thread computes a block of output rows, and so reads all of B. A short product over a
// large B cuts B instead:
// - kDepth: each thread multiplies a range of the contracted dimension (rows of B [K, N]); the
//   threads' partial products are then added in the order of their ranges.
// - kColumns: each thread computes a range of output columns (rows of B stored [N, K]).
// Each thread then reads 1/T of B instead of all of it. What matters more: the rows of a weight
// that a thread reads are the rows that the optimizer's elementwise update, cut into the same
// T ranges, writes on that thread. Under kRows every core holds every line of the weight, and a
// store to a line another core holds costs far more than a local one (50 us against 2 us for
// 400 KB on the 2-vCPU development host): the MLP's Adam update of its first layer took 65 us
// instead of 20. The choice depends only on the shapes and the pool's thread count, so dot's
// kernel and fused_dot cut alike and round alike; kDepth's sums depend on the thread count, as
// an OpenMP BLAS's do. (docs/performance.md, "Cores and cache lines".)
struct GemmSplit {
  enum Kind { kRows, kColumns, kDepth };
  Kind kind = kRows;
  int64_t parts = 1;  // kColumns, kDepth: how many ranges
  int64_t step = 0;   // kColumns, kDepth: columns or depth per range (the last may be shorter)
};

// The split of one GEMM of `batch` [m, k] x [k, n] products (B stored [n, k] when
// b_transposed) over `threads` threads.
inline GemmSplit gemm_split(int64_t batch, int64_t m, int64_t k, int64_t n, bool b_transposed,
                            int64_t threads) {
  constexpr int64_t kLargeB = int64_t{1} << 15;  // elements of B from which B is cut
  constexpr int64_t kMinDepth = 128;             // per range
  constexpr int64_t kMinColumns = 64;            // per range
  // KILN_GEMM_SPLIT=0 keeps every GEMM on row blocks: to measure the two.
  static const bool enabled = [] {
    const char* env = std::getenv("KILN_GEMM_SPLIT");
    return env == nullptr || std::string(env) != "0";
  }();
  GemmSplit s;
  if (!enabled || threads < 2 || batch != 1 || k * n < kLargeB) return s;
  // B at least twice the output (k >= 2m): the partial products' extra traffic (T - 1 times
  // the m x n output) stays below the saving of each thread reading all of B.
  if (!b_transposed && k >= 2 * m && k >= threads * kMinDepth) {
    s.kind = GemmSplit::kDepth;
    s.step = (k + threads - 1) / threads;
    s.parts = (k + s.step - 1) / s.step;
  } else if (b_transposed && n >= 2 * m && n >= threads * kMinColumns) {
    s.kind = GemmSplit::kColumns;
    s.step = ((n + threads - 1) / threads + 15) / 16 * 16;  // whole vectors of columns
    s.parts = (n + s.step - 1) / s.step;
  }
  return s;
}

// The split over the pool's threads.
inline GemmSplit gemm_split(int64_t batch, int64_t m, int64_t k, int64_t n, bool b_transposed) {
  return gemm_split(batch, m, k, n, b_transposed, runtime::ThreadPool::global().num_threads());
}

// A block C = op(A) op(B) of `rows` x `cols` with inner size `depth`, on the calling thread: A
// is rows x depth (or stored transposed, depth x rows) with row stride lda, B is depth x cols
// (or stored cols x depth) with row stride ldb, C has row stride ldc. f32 blocks run on
// oneDNN's sgemm where it is enabled and gains (ops/onednn_matmul.h: sgemm_block), the rest on
// Eigen. (ops/linalg.cc; float and double.)
template <class T>
void gemm_block(const T* a, int64_t lda, bool a_transposed, const T* b, int64_t ldb,
                bool b_transposed, T* c, int64_t ldc, int64_t rows, int64_t depth, int64_t cols);

// Called on each block of whole, final output rows of a gemm(): (batch index, first row, rows),
// once per row, on the thread that finished them (the fused kernels' epilogue, while in cache).
using GemmRowsDone = std::function<void(int64_t, int64_t, int64_t)>;

// C = A B for `batch` products of [m, k] x [k, n] (A stored [batch, k, m] when a_transposed, B
// stored [batch, n, k] when b_transposed; C [batch, m, n]), on the pool, cut as gemm_split
// says. dot's kernel and the compiler's fused_dot both multiply through it, and so round alike.
template <class T>
void gemm(const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t k, int64_t n,
          bool a_transposed, bool b_transposed, const GemmRowsDone& rows_done = {});

}  // namespace kiln::ops

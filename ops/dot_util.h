// What dot's reference kernel (ops/linalg.cc) and the compiler's fused_dot share: reading the
// dot's attributes, the layout helpers that map operands onto [B, M, K] x [B, K, N] GEMMs, and
// the GEMMs' row blocking (fused_dot must round exactly as dot does, so it must block
// identically).
#pragma once

#include <algorithm>
#include <cstdint>
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

// One block of a GEMM's output rows, run on the calling thread: out (`rows` x n, row stride n)
// = rows [r0, r0 + rows) of A times B, where A is [m, k] row-major or, when a_transposed, stored
// as [k, m], and B is [k, n] or, when b_transposed, stored as [n, k]. f32 blocks run on
// oneDNN's sgemm where it is enabled and gains (ops/onednn_matmul.h: sgemm_rows), the rest on
// Eigen. dot's kernel and the compiler's fused_dot both multiply through it, block by
// the same for_each_row_block, and so round alike. (ops/linalg.cc; float and double.)
template <class T>
void gemm_rows(const T* a, const T* b, T* out, int64_t m, int64_t k, int64_t n, int64_t r0,
               int64_t rows, bool a_transposed, bool b_transposed);

}  // namespace kiln::ops

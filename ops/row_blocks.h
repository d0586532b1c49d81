// The row blocking of dot's GEMMs, shared by dot's reference kernel (ops/linalg.cc) and the
// compiler's fused_dot (which must round exactly as dot does, so it must block identically).
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/thread_pool.h"

namespace kiln::ops {

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

}  // namespace kiln::ops

// The one CPU thread pool: kernels split work over it with parallel_for.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace kiln::runtime {

class ThreadPool {
 public:
  // The process-wide pool. Its size is KILN_NUM_THREADS, or the number of cores.
  static ThreadPool& global();
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const;
  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least `grain` long
  // (except the last), on the pool and the calling thread; returns when all are done.
  // Called from inside a pool task it runs inline. The first exception is rethrown.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// While one is alive on a thread, parallel_for called there runs inline: for threads that run
// many small ops beside the pool's own work, such as the input pipeline's map workers and
// prefetch thread, where splitting each op over the pool costs more in waiting than it gains
// and takes the cores from the training step (tf.data's max_intra_op_parallelism = 1).
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool saved_;
};

inline void parallel_for(int64_t n, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
}

}  // namespace kiln::runtime

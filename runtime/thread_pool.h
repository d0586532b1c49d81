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
  // Whether the calling thread is a worker of a pool (of any: the callers of parallel_for are
  // not).
  static bool on_worker();
  // Called by idle work (IdleWork) at points where it may pause: runs the tasks that callers of
  // parallel_for queued meanwhile, so that a long piece of idle work (the input pipeline making
  // a batch) holds none of them up. Elsewhere it returns at once.
  static void yield_to_tasks();

  struct Impl;  // internal
  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least `grain` long
  // (except the last), on the pool and the calling thread; returns when all are done.
  // Called from inside a pool task it runs inline. The first exception is rethrown.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  friend class IdleWork;
  std::unique_ptr<Impl> impl_;
};

struct IdleSource;

// Work for the pool's workers when they have no task: `step` does one short piece of it (tens
// of microseconds: a worker busy with it leaves the next parallel_for's chunks to its caller)
// and returns true, or returns false when there is nothing to do now. Workers call it between
// tasks, one at a time, with parallel_for running inline; it must not throw. The input
// pipeline's prefetch registers one, so that the cycles a worker would spend spinning between
// a training step's kernels produce the next batches instead of being taken from the step by
// another thread. After the destructor returns, step is not running and is never called again.
class IdleWork {
 public:
  explicit IdleWork(std::function<bool()> step, ThreadPool& pool = ThreadPool::global());
  ~IdleWork();
  IdleWork(const IdleWork&) = delete;
  IdleWork& operator=(const IdleWork&) = delete;

  // There is work again (after step returned false): wakes a sleeping worker to call step.
  void wake();

 private:
  ThreadPool& pool_;
  std::shared_ptr<IdleSource> source_;
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

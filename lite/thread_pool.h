// A fixed pool of worker threads for the lite runtime: parallel_for splits a range of rows
// across them and the caller's thread, and returns when all parts are done. No thread is
// started per call, and workers spin briefly before sleeping: a batch-1 op lasts microseconds,
// less than waking a sleeping thread takes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::lite {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads in all, the caller's included
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) over parts of [0, count), each at least `grain` long (one part, on
  // the caller's thread, when count < 2 * grain).
  void parallel_for(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void work(int index);
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t count_ = 0, part_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

}  // namespace kiln::lite

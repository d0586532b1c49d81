// ThreadPool: a call publishes its range and bumps a generation counter; each worker takes its
// part, counts itself done, and spins on the counter for a while before sleeping on a
// condition variable.
#include "lite/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln::lite {
namespace {

void pause() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// About 50-100 microseconds of spinning: longer than the gap between two ops of one run.
constexpr int kSpins = 20000;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpins && generation_.load(std::memory_order_acquire) == seen; ++i) {
      pause();
    }
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t begin, end;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      if (stop_) return;
      seen = generation_.load();
      fn = fn_;
      begin = std::min(count_, index * part_);
      end = std::min(count_, begin + part_);
    }
    if (begin < end) (*fn)(begin, end);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t count, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t parts = std::min<int64_t>(size(), count / grain);
  if (parts <= 1) {
    fn(0, count);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    count_ = count;
    part_ = (count + size() - 1) / size();
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  fn(0, std::min(count, part_));
  while (pending_.load(std::memory_order_acquire) != 0) pause();
}

}  // namespace kiln::lite

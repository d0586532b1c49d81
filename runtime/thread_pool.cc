// A fixed pool of worker threads with a shared task queue.
#include "runtime/thread_pool.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::runtime {
namespace {
thread_local bool t_inside_pool = false;
}

struct ThreadPool::Impl {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  std::vector<std::thread> workers;
  bool stop = false;
  int num_threads = 1;
};

ThreadPool::ThreadPool(int num_threads) : impl_(std::make_unique<Impl>()) {
  impl_->num_threads = std::max(1, num_threads);
  for (int i = 1; i < impl_->num_threads; ++i) {  // the caller is the remaining thread
    impl_->workers.emplace_back([this] {
      t_inside_pool = true;
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock lock(impl_->mu);
          impl_->cv.wait(lock, [&] { return impl_->stop || !impl_->tasks.empty(); });
          if (impl_->stop && impl_->tasks.empty()) return;
          task = std::move(impl_->tasks.front());
          impl_->tasks.pop_front();
        }
        task();
      }
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  for (auto& w : impl_->workers) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool* pool = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("KILN_NUM_THREADS")) n = std::atoi(env);
    return new ThreadPool(std::max(1, n));  // leaked on purpose: kernels may run at exit
  }();
  return *pool;
}

int ThreadPool::num_threads() const { return impl_->num_threads; }

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>(impl_->num_threads, (n + grain - 1) / grain);
  if (chunks <= 1 || t_inside_pool) {
    fn(0, n);
    return;
  }
  int64_t step = (n + chunks - 1) / chunks;
  std::mutex done_mu;
  std::condition_variable done_cv;
  int64_t remaining = chunks - 1;
  std::exception_ptr error;
  auto run = [&](int64_t begin, int64_t end) {
    try {
      fn(begin, end);
    } catch (...) {
      std::lock_guard lock(done_mu);
      if (!error) error = std::current_exception();
    }
  };
  {
    std::lock_guard lock(impl_->mu);
    for (int64_t c = 1; c < chunks; ++c) {
      int64_t begin = c * step, end = std::min(n, begin + step);
      impl_->tasks.emplace_back([&, begin, end] {
        if (begin < end) run(begin, end);
        std::lock_guard lock(done_mu);
        if (--remaining == 0) done_cv.notify_one();
      });
    }
  }
  impl_->cv.notify_all();
  t_inside_pool = true;
  run(0, std::min(n, step));
  t_inside_pool = false;
  std::unique_lock lock(done_mu);
  done_cv.wait(lock, [&] { return remaining == 0; });
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln::runtime

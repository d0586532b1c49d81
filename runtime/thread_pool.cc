// A fixed pool of worker threads with a shared task queue. Idle workers spin briefly before
// sleeping, and so does a caller waiting for its tasks: a step's kernels call parallel_for
// back to back, and a futex wake-up costs more than most of those kernels.
#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
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
thread_local bool t_serial = false;  // a SerialScope is alive on this thread

// How long an idle worker, or a caller waiting for its tasks, spins before sleeping.
constexpr auto kWorkerSpin = std::chrono::microseconds(100);
constexpr auto kCallerSpin = std::chrono::microseconds(2000);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until `ready()` or `limit` has passed; returns ready().
template <class Ready>
bool spin_until(Ready ready, std::chrono::microseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return ready();
  }
}
}  // namespace

struct ThreadPool::Impl {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  std::atomic<int64_t> queued{0};  // tasks.size(), readable without the lock
  int sleepers = 0;                // workers waiting on cv (under mu)
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
        spin_until([&] { return impl_->queued.load(std::memory_order_acquire) > 0; }, kWorkerSpin);
        std::function<void()> task;
        {
          std::unique_lock lock(impl_->mu);
          ++impl_->sleepers;
          impl_->cv.wait(lock, [&] { return impl_->stop || !impl_->tasks.empty(); });
          --impl_->sleepers;
          if (impl_->stop && impl_->tasks.empty()) return;
          task = std::move(impl_->tasks.front());
          impl_->tasks.pop_front();
          impl_->queued.fetch_sub(1, std::memory_order_relaxed);
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

SerialScope::SerialScope() : saved_(t_serial) { t_serial = true; }
SerialScope::~SerialScope() { t_serial = saved_; }

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>(impl_->num_threads, (n + grain - 1) / grain);
  if (chunks <= 1 || t_inside_pool || t_serial) {
    fn(0, n);
    return;
  }
  int64_t step = (n + chunks - 1) / chunks;
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::atomic<int64_t> remaining{chunks - 1};
  std::exception_ptr error;
  auto run = [&](int64_t begin, int64_t end) {
    try {
      fn(begin, end);
    } catch (...) {
      std::lock_guard lock(done_mu);
      if (!error) error = std::current_exception();
    }
  };
  bool wake = false;
  {
    std::lock_guard lock(impl_->mu);
    for (int64_t c = 1; c < chunks; ++c) {
      int64_t begin = c * step, end = std::min(n, begin + step);
      impl_->tasks.emplace_back([&, begin, end] {
        if (begin < end) run(begin, end);
        // The caller may be spinning on `remaining` or sleeping on done_cv: lock so that a
        // sleeping caller cannot miss the last decrement.
        std::lock_guard lock(done_mu);
        if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) done_cv.notify_one();
      });
    }
    impl_->queued.fetch_add(chunks - 1, std::memory_order_release);
    wake = impl_->sleepers > 0;  // spinning workers find the tasks by themselves
  }
  if (wake) impl_->cv.notify_all();
  t_inside_pool = true;
  run(0, std::min(n, step));
  // While chunks are still queued, run them here (the newest first: this call's own, unless
  // another caller queued since): a worker that is asleep, or descheduled because another
  // thread (the input pipeline, another process) took its core, then holds nothing up.
  while (remaining.load(std::memory_order_acquire) != 0 &&
         impl_->queued.load(std::memory_order_acquire) > 0) {
    std::function<void()> task;
    {
      std::lock_guard lock(impl_->mu);
      if (impl_->tasks.empty()) break;
      task = std::move(impl_->tasks.back());
      impl_->tasks.pop_back();
      impl_->queued.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
  t_inside_pool = false;
  if (!spin_until([&] { return remaining.load(std::memory_order_acquire) == 0; }, kCallerSpin)) {
    std::unique_lock lock(done_mu);
    done_cv.wait(lock, [&] { return remaining.load(std::memory_order_acquire) == 0; });
  }
  // The last task may still hold done_mu (it notifies under it): wait for it to let go
  // before done_mu and done_cv go out of scope.
  std::lock_guard last(done_mu);
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln::runtime

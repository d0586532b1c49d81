// A fixed pool of worker threads with a shared task queue. Idle workers spin briefly before
// sleeping, and so does a caller waiting for its tasks: a step's kernels call parallel_for
// back to back, and a futex wake-up costs more than most of those kernels. A worker with no
// task first looks for idle work (IdleWork: the input pipeline's prefetch), so that the time
// it would spend spinning between a training step's kernels produces the next batches.
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
thread_local bool t_worker = false;                    // this thread is a pool's worker
thread_local ThreadPool::Impl* t_idle_pool = nullptr;  // while a worker runs its idle work
thread_local bool t_serial = false;                    // a SerialScope is alive on this thread

// How long an idle worker, or a caller waiting for its tasks, spins before sleeping.
constexpr auto kWorkerSpin = std::chrono::microseconds(100);
constexpr auto kCallerSpin = std::chrono::microseconds(2000);
// How long a worker whose task is done waits for the next before it turns to idle work: the
// kernels of a step follow each other within a few microseconds, and a worker busy with idle
// work leaves the caller to run the next kernel's chunks alone.
constexpr auto kIdleWorkDelay = std::chrono::microseconds(3);
// A parallel_for inside idle work runs in at most this many pieces, yielding between them.
constexpr int64_t kIdlePieces = 16;

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

// A registered IdleWork's step; `running` is held while a worker calls it.
struct IdleSource {
  std::function<bool()> step;
  std::mutex running;
};

struct ThreadPool::Impl {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  std::atomic<int64_t> queued{0};  // tasks.size(), readable without the lock
  std::atomic<int> sleepers{0};    // workers waiting on cv (changed under mu)
  std::vector<std::thread> workers;
  bool stop = false;
  int num_threads = 1;

  std::mutex idle_mu;
  std::vector<std::shared_ptr<IdleSource>> idle_sources;  // under idle_mu
  size_t idle_next = 0;                                   // round robin, under idle_mu
  std::atomic<int> idle_count{0};                         // idle_sources.size()
  std::atomic<uint64_t> idle_epoch{0};                    // bumped by IdleWork::wake()

  bool has_task() const { return queued.load(std::memory_order_acquire) > 0; }
  bool pop_task(std::function<void()>& task);  // the oldest queued task, if any
  void worker_loop();
  bool run_idle_work();
};

// One step of the registered sources, taken round robin, skipping those another worker is
// running, until one has done something; false when none had.
bool ThreadPool::Impl::run_idle_work() {
  if (idle_count.load(std::memory_order_acquire) == 0) return false;
  for (int tried = 0, n = idle_count.load(); tried < n; ++tried) {
    std::shared_ptr<IdleSource> source;
    std::unique_lock<std::mutex> running;
    {
      // Taken under idle_mu: IdleWork's destructor, which takes the source off the list
      // under it, then waits for `running`.
      std::lock_guard lock(idle_mu);
      if (idle_sources.empty()) return false;
      source = idle_sources[idle_next++ % idle_sources.size()];
      running = std::unique_lock(source->running, std::try_to_lock);
      if (!running.owns_lock()) continue;
    }
    if (has_task()) return true;  // the pool's own tasks come first
    t_idle_pool = this;
    const bool did = source->step();
    t_idle_pool = nullptr;
    if (did) return true;
  }
  return false;
}

bool ThreadPool::Impl::pop_task(std::function<void()>& task) {
  std::lock_guard lock(mu);
  if (tasks.empty()) return false;
  task = std::move(tasks.front());
  tasks.pop_front();
  queued.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void ThreadPool::yield_to_tasks() {
  Impl* pool = t_idle_pool;
  if (pool == nullptr || !pool->has_task()) return;
  t_idle_pool = nullptr;  // the tasks run here do not yield in turn
  for (std::function<void()> task; pool->pop_task(task);) task();
  t_idle_pool = pool;
}

void ThreadPool::Impl::worker_loop() {
  t_inside_pool = true;
  t_worker = true;
  for (;;) {
    if (!spin_until([&] { return has_task(); }, kIdleWorkDelay) && run_idle_work()) continue;
    const uint64_t seen = idle_epoch.load();
    auto woken = [&] { return has_task() || idle_epoch.load() != seen; };
    spin_until(woken, kWorkerSpin);
    std::function<void()> task;
    {
      std::unique_lock lock(mu);
      sleepers.fetch_add(1);
      cv.wait(lock, [&] { return stop || !tasks.empty() || idle_epoch.load() != seen; });
      sleepers.fetch_sub(1);
      if (stop && tasks.empty()) return;
      if (tasks.empty()) continue;  // woken for idle work
      task = std::move(tasks.front());
      tasks.pop_front();
      queued.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
}

ThreadPool::ThreadPool(int num_threads) : impl_(std::make_unique<Impl>()) {
  impl_->num_threads = std::max(1, num_threads);
  for (int i = 1; i < impl_->num_threads; ++i) {  // the caller is the remaining thread
    impl_->workers.emplace_back([this] { impl_->worker_loop(); });
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

bool ThreadPool::on_worker() { return t_worker; }

IdleWork::IdleWork(std::function<bool()> step, ThreadPool& pool)
    : pool_(pool), source_(std::make_shared<IdleSource>()) {
  source_->step = std::move(step);
  ThreadPool::Impl& impl = *pool_.impl_;
  {
    std::lock_guard lock(impl.idle_mu);
    impl.idle_sources.push_back(source_);
    impl.idle_count.store(static_cast<int>(impl.idle_sources.size()));
  }
  wake();
}

IdleWork::~IdleWork() {
  ThreadPool::Impl& impl = *pool_.impl_;
  {
    std::lock_guard lock(impl.idle_mu);
    std::erase(impl.idle_sources, source_);
    impl.idle_count.store(static_cast<int>(impl.idle_sources.size()));
  }
  std::lock_guard running(source_->running);  // a worker still in step() finishes first
}

void IdleWork::wake() {
  ThreadPool::Impl& impl = *pool_.impl_;
  impl.idle_epoch.fetch_add(1);  // seq_cst with the sleepers count: no lost wake-up
  if (impl.sleepers.load() > 0) {
    std::lock_guard lock(impl.mu);
    impl.cv.notify_one();
  }
}

SerialScope::SerialScope() : saved_(t_serial) { t_serial = true; }
SerialScope::~SerialScope() { t_serial = saved_; }

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>(impl_->num_threads, (n + grain - 1) / grain);
  if (chunks <= 1 || t_inside_pool || t_serial) {
    if (t_idle_pool != nullptr && n > grain) {
      // Idle work's kernels (the input pipeline's, on a worker) pause between pieces (at
      // least grain long, at most kIdlePieces of them) for the tasks queued meanwhile.
      const int64_t piece = std::max(grain, (n + kIdlePieces - 1) / kIdlePieces);
      for (int64_t begin = 0; begin < n; begin += piece) {
        fn(begin, std::min(n, begin + piece));
        yield_to_tasks();
      }
      return;
    }
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
    wake = impl_->sleepers.load() > 0;  // spinning workers find the tasks by themselves
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

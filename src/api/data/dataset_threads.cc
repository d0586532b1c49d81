// The transformations that run background threads: map with a pool of its own
// (num_parallel_calls > 1) and prefetch. Their iterators own the threads and join them when
// destroyed; an exception from upstream or from the function travels to the consumer and is
// rethrown at the position of the element that raised it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "runtime/thread_pool.h"
#include "src/api/data/dataset_node.h"

namespace kiln::data::detail {
namespace {

// What a worker hands the consumer: an element or the exception raised while making it.
struct Result {
  std::optional<Element> element;
  std::exception_ptr error;
};

Element take(Result& r) {
  if (r.error) std::rethrow_exception(r.error);
  return std::move(*r.element);
}

// ---- parallel map ----

// How long a waiting consumer of a parallel map waits for a group of results before it takes
// them one by one.
constexpr std::chrono::milliseconds kMaxGroupingDelay{1};

// Workers take chunks of elements from the input in turn (each element numbered by its
// position), apply fn concurrently, and post results. At most `window` elements are taken and
// not yet handed to the consumer, who takes every ready result at once, so the workers stay a
// bounded distance ahead. Waking a thread costs more than a cheap fn (tens of microseconds in
// a virtual machine), so chunks grow as large as fn is cheap, and the two sides wake each
// other in groups: a waiting consumer once `wake_batch` results are ready (or the window is
// full, the input done, or kMaxGroupingDelay has passed), waiting workers once that many
// places are free.
class ParallelMapIterator : public IteratorImpl {
 public:
  ParallelMapIterator(std::unique_ptr<IteratorImpl> input, Dataset::MapFn fn, int64_t threads,
                      bool deterministic)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        deterministic_(deterministic),
        threads_(threads) {
    if (deterministic_) slots_.resize(static_cast<size_t>(max_window()));
    workers_.reserve(static_cast<size_t>(threads));
    try {
      for (int64_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  ~ParallelMapIterator() override { stop(); }

  std::optional<Element> next() override {
    if (taken_by_consumer_.empty() && !take_ready()) return std::nullopt;
    Result r = std::move(taken_by_consumer_.front());
    taken_by_consumer_.pop_front();
    return take(r);
  }

 private:
  // Moves every ready result (in order when deterministic) to taken_by_consumer_, waiting for
  // some if there are none; false at the end.
  bool take_ready() {
    std::unique_lock lock(mu_);
    if (ready() == 0 && !at_end()) {
      if (workers_waiting_ > 0) workers_cv_.notify_all();
      consumer_waiting_ = true;
      if (!consumer_cv_.wait_for(lock, kMaxGroupingDelay, [&] { return consumer_should_wake(); })) {
        // A slow fn: take the next result as soon as it is there.
        consumer_eager_ = true;
        consumer_cv_.wait(lock, [&] { return consumer_should_wake(); });
        consumer_eager_ = false;
      }
      consumer_waiting_ = false;
    }
    const int64_t n = ready();
    if (n == 0) return false;  // at the end
    if (deterministic_) {
      for (int64_t i = 0; i < n; ++i, ++consumed_) {
        std::optional<Result>& slot = slot_of(consumed_);
        taken_by_consumer_.push_back(std::move(*slot));
        slot.reset();
      }
      contiguous_ = 0;
    } else {
      for (Result& r : completed_) taken_by_consumer_.push_back(std::move(r));
      completed_.clear();
    }
    taken_ -= n;
    const bool wake_workers = workers_waiting_ > 0 && window() - taken_ >= wake_batch();
    lock.unlock();  // before notifying, so that the woken do not wait for the lock
    if (wake_workers) workers_cv_.notify_all();
    return true;
  }

  // Under mu_: two chunks per thread, so each has the next chunk to do while its last one
  // waits for the consumer.
  int64_t window() const { return std::max<int64_t>(4, 2 * threads_ * chunk_); }
  int64_t max_window() const { return std::max<int64_t>(4, 2 * threads_ * kMaxChunk); }
  // Deterministic: the slot of a position taken from the input and not yet consumed. Such
  // positions span at most max_window(), so a ring of that many slots holds them all.
  std::optional<Result>& slot_of(int64_t position) {
    return slots_[static_cast<size_t>(position % max_window())];
  }
  int64_t wake_batch() const { return window() / 2; }
  // Under mu_: results the consumer can take now, in order when deterministic.
  int64_t ready() const {
    return deterministic_ ? contiguous_ : static_cast<int64_t>(completed_.size());
  }
  bool at_end() const {
    return input_done_ && (deterministic_ ? consumed_ == end_position_ : taken_ == 0);
  }
  bool consumer_should_wake() const {
    if (at_end()) return true;
    int64_t r = ready();
    return r > 0 && (consumer_eager_ || r >= wake_batch() || input_done_ || taken_ >= window());
  }
  bool consumer_due() const { return consumer_waiting_ && consumer_should_wake(); }

  void work() {
    runtime::SerialScope serial;  // many small ops beside the training step: no intra-op split
    std::vector<Result> results;
    std::unique_lock lock(mu_);
    for (;;) {
      while (!cancelled_ && !input_done_ && taken_ >= window()) {
        if (consumer_due()) consumer_cv_.notify_one();  // a full window is reason enough
        ++workers_waiting_;
        workers_cv_.wait(lock);
        --workers_waiting_;
      }
      if (cancelled_ || input_done_) return;
      // Reserve places in the window for a chunk of elements before reading the input.
      const int64_t reserved = std::min(chunk_, window() - taken_);
      taken_ += reserved;
      lock.unlock();

      // Read the chunk: consecutive positions from `first`. An input error is the chunk's
      // last result; the end of the input cuts the chunk short.
      results.clear();
      int64_t first = -1;
      bool ended = false, input_failed = false;
      {
        std::lock_guard input_lock(input_mu_);
        if (!input_ended_ && !cancelled_) {
          first = next_position_;
          while (static_cast<int64_t>(results.size()) < reserved && !cancelled_) {
            Result& r = results.emplace_back();
            try {
              r.element = input_->next();
              ended = !r.element;
            } catch (...) {
              r.error = std::current_exception();
              input_failed = true;
            }
            if (ended) results.pop_back();
            if (ended || input_failed) break;
          }
          next_position_ += static_cast<int64_t>(results.size());
          input_ended_ = ended || input_failed;
        }
      }
      const auto start = std::chrono::steady_clock::now();
      int64_t mapped = 0;
      for (Result& r : results) {
        if (r.error || cancelled_) continue;
        try {
          r.element = fn_(std::move(*r.element));
        } catch (...) {
          r.error = std::current_exception();
          r.element.reset();
        }
        ++mapped;
      }
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
              .count();

      lock.lock();
      if (mapped > 0) adapt_chunk(ns / static_cast<double>(mapped));
      taken_ -= reserved - static_cast<int64_t>(results.size());
      if (ended || input_failed) {
        input_done_ = true;
        end_position_ = first + static_cast<int64_t>(results.size());
        workers_cv_.notify_all();  // nothing more to take
      }
      for (size_t i = 0; i < results.size(); ++i) {
        if (deterministic_) {
          slot_of(first + static_cast<int64_t>(i)) = std::move(results[i]);
        } else {
          completed_.push_back(std::move(results[i]));
        }
      }
      if (deterministic_) {
        while (contiguous_ < max_window() && slot_of(consumed_ + contiguous_).has_value()) {
          ++contiguous_;
        }
      }
      const bool wake = consumer_due();
      const bool done = first < 0 || ended || input_failed;
      if (wake || done) {
        lock.unlock();  // before notifying, so that the consumer does not wait for the lock
        if (wake) consumer_cv_.notify_one();
        if (done) return;
        lock.lock();
      }
    }
  }

  // Under mu_: sizes chunks to about kChunkWork of fn's time, from a running average of it,
  // so that a cheap fn pays for a handover once per many elements and a slow one is spread
  // over the threads element by element.
  void adapt_chunk(double ns_per_element) {
    fn_ns_ = fn_ns_ == 0 ? ns_per_element : 0.8 * fn_ns_ + 0.2 * ns_per_element;
    double fit = kChunkWork / std::max(fn_ns_, 1.0);
    // Grow at most twofold per chunk: one quick first call must not make a worker take 64
    // slow ones (the consumer waits for the chunk holding the next position).
    chunk_ = std::clamp<int64_t>(static_cast<int64_t>(fit), 1, std::min(kMaxChunk, 2 * chunk_));
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    workers_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  std::unique_ptr<IteratorImpl> input_;
  Dataset::MapFn fn_;
  const bool deterministic_;
  const int64_t threads_;
  static constexpr double kChunkWork = 500e3;  // ns
  // With chunks of at most 16 elements and 200 us, two workers and the consumer woke each
  // other ~19k times a second on a cheap fn (parsing a record, ~4 us), and two workers ran at
  // ~1.4x of one; at 64 elements ~3.7k times (1.66-1.73x), at 128 and 500 us 1.69-1.76x.
  static constexpr int64_t kMaxChunk = 128;
  std::vector<std::thread> workers_;

  std::mutex input_mu_;  // the input, next_position_ and input_ended_
  int64_t next_position_ = 0;
  bool input_ended_ = false;

  std::mutex mu_;  // everything below
  std::condition_variable consumer_cv_;
  std::condition_variable workers_cv_;
  std::atomic<bool> cancelled_ = false;  // written under mu_
  bool consumer_waiting_ = false;
  bool consumer_eager_ = false;  // waited kMaxGroupingDelay already: wake for one result
  int64_t workers_waiting_ = 0;
  int64_t chunk_ = 1;  // elements a worker takes at once
  double fn_ns_ = 0;   // average time of one fn call
  bool input_done_ = false;
  int64_t end_position_ = -1;  // the number of results, once the input is done
  int64_t taken_ = 0;          // elements taken from the input and not yet consumed
  int64_t consumed_ = 0;
  int64_t contiguous_ = 0;                    // deterministic: results ready from consumed_ on
  std::vector<std::optional<Result>> slots_;  // deterministic: results by position
  std::deque<Result> completed_;              // otherwise: results in the order they finished

  std::deque<Result> taken_by_consumer_;  // the consumer's own: no lock
};

class ParallelMapNode : public DatasetNode {
 public:
  ParallelMapNode(NodePtr input, Dataset::MapFn fn, int64_t threads, bool deterministic)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        threads_(threads),
        deterministic_(deterministic) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    return std::make_unique<ParallelMapIterator>(input_->make_iterator(epoch), fn_, threads_,
                                                 deterministic_);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  bool waits_on_threads() const override { return true; }
  std::string describe() const override {
    return input_->describe() + (deterministic_ ? ".map()" : ".map(nondeterministic)");
  }

 private:
  NodePtr input_;
  Dataset::MapFn fn_;
  int64_t threads_;
  bool deterministic_;
};

// ---- prefetch ----

// Elements are produced by whichever thread is free, one at a time: the compute pool's idle
// workers (runtime::IdleWork), which fill the buffer in the time they would spend spinning
// between a training step's kernels, and the iterator's own thread, which steps in only when
// the buffer has run empty (the consumer is about to wait). A thread of its own that produced
// whenever there was room would take its core from the step's kernels, and stall the whole
// step while it held it. Where the pool has no workers, or the input waits for threads of its
// own (which would hold a worker from the step), the thread alone fills the buffer.
class PrefetchIterator : public IteratorImpl {
 public:
  // pooled: the compute pool's workers may produce (the pool has workers, and the input
  // never waits for threads of its own, which would hold a worker from its tasks).
  PrefetchIterator(std::unique_ptr<IteratorImpl> input, int64_t buffer_size, bool pooled)
      : input_(std::move(input)), capacity_(static_cast<size_t>(buffer_size)), pooled_(pooled) {
    if (pooled_) idle_.emplace([this] { return produce_if_room(); });
    producer_ = std::thread([this] { produce(); });
  }
  ~PrefetchIterator() override {
    idle_.reset();  // no pool worker is producing after this
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    producer_cv_.notify_one();
    producer_.join();
  }

  std::optional<Element> next() override {
    std::unique_lock lock(mu_);
    if (ready_.empty() && !ended_) {
      consumer_waiting_ = true;
      consumer_cv_.wait(lock, [&] { return !ready_.empty() || ended_; });
      consumer_waiting_ = false;
    }
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      return std::nullopt;
    }
    Element e = std::move(ready_.front());
    ready_.pop_front();
    const bool refill = !ended_, wake_producer = producer_waiting_ && producer_due();
    lock.unlock();
    if (wake_producer) producer_cv_.notify_one();
    if (refill && idle_) idle_->wake();  // a sleeping worker fills the room just made
    return e;
  }

 private:
  // Under mu_: the producer thread's turn (see the class comment).
  bool producer_due() const {
    return cancelled_ || ended_ || (ready_.size() < capacity_ && (ready_.empty() || !pooled_));
  }

  void produce() {
    runtime::SerialScope serial;  // many small ops beside the training step: no intra-op split
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (!producer_due()) {
          producer_waiting_ = true;
          producer_cv_.wait(lock, [&] { return producer_due(); });
          producer_waiting_ = false;
        }
        if (cancelled_ || ended_) return;
      }
      std::lock_guard producing(producing_mu_);
      produce_one();
    }
  }

  // A pool worker's idle work: one element, if there is room and no other thread is producing.
  bool produce_if_room() {
    std::unique_lock producing(producing_mu_, std::try_to_lock);
    if (!producing.owns_lock()) return false;
    {
      std::lock_guard lock(mu_);
      if (cancelled_ || ended_ || ready_.size() >= capacity_) return false;
    }
    produce_one();
    return true;
  }

  // Under producing_mu_: reads one element (or the end, or an error) into the buffer.
  void produce_one() {
    {
      std::lock_guard lock(mu_);
      if (cancelled_ || ended_ || ready_.size() >= capacity_) return;
    }
    std::optional<Element> e;
    std::exception_ptr error;
    try {
      e = input_->next();
    } catch (...) {
      error = std::current_exception();
    }
    std::unique_lock lock(mu_);
    if (e) {
      ready_.push_back(std::move(*e));
    } else {
      ended_ = true;
      error_ = error;
    }
    const bool wake = consumer_waiting_, wake_producer = ended_ && producer_waiting_;
    lock.unlock();
    if (wake) consumer_cv_.notify_one();
    if (wake_producer) producer_cv_.notify_one();  // to let it return
  }

  std::unique_ptr<IteratorImpl> input_;  // read under producing_mu_
  const size_t capacity_;
  std::mutex producing_mu_;  // held by the one thread producing an element
  std::mutex mu_;
  std::condition_variable consumer_cv_;
  std::condition_variable producer_cv_;
  bool consumer_waiting_ = false;
  bool producer_waiting_ = false;
  std::deque<Element> ready_;
  bool ended_ = false;  // the input ended or failed (error_); nothing more comes after ready_
  std::exception_ptr error_;
  bool cancelled_ = false;
  const bool pooled_;
  std::optional<runtime::IdleWork> idle_;
  std::thread producer_;  // last: starts after everything it uses is constructed
};

class PrefetchNode : public DatasetNode {
 public:
  PrefetchNode(NodePtr input, int64_t buffer_size)
      : input_(std::move(input)), buffer_size_(buffer_size) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    const bool pooled =
        runtime::ThreadPool::global().num_threads() > 1 && !input_->waits_on_threads();
    return std::make_unique<PrefetchIterator>(input_->make_iterator(epoch), buffer_size_, pooled);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  bool waits_on_threads() const override { return true; }
  std::string describe() const override { return input_->describe(); }

 private:
  NodePtr input_;
  int64_t buffer_size_;
};

}  // namespace

NodePtr make_parallel_map_node(NodePtr input, Dataset::MapFn fn, int64_t threads,
                               bool deterministic) {
  return std::make_shared<ParallelMapNode>(std::move(input), std::move(fn), threads, deterministic);
}

NodePtr make_prefetch_node(NodePtr input, int64_t buffer_size) {
  return std::make_shared<PrefetchNode>(std::move(input), buffer_size);
}

}  // namespace kiln::data::detail

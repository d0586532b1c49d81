// The transformations that run background threads: map with a pool of its own
// (num_parallel_calls > 1) and prefetch. Their iterators own the threads and join them when
// destroyed; an exception from upstream or from the function travels to the consumer and is
// rethrown at the position of the element that raised it.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "src/data/dataset_node.h"

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

// Workers take elements from the input in turn (each numbered by its position), apply fn
// concurrently, and post results. At most `window` elements are taken and not yet consumed,
// so the workers stay a bounded distance ahead of the consumer.
class ParallelMapIterator : public IteratorImpl {
 public:
  ParallelMapIterator(std::unique_ptr<IteratorImpl> input, Dataset::MapFn fn, int64_t threads,
                      bool deterministic)
      : input_(std::move(input)),
        fn_(std::move(fn)),
        deterministic_(deterministic),
        window_(2 * threads) {
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
    std::unique_lock lock(mu_);
    if (deterministic_) {
      cv_.wait(lock, [&] { return ordered_.count(consumed_) || consumed_ == end_position_; });
      auto it = ordered_.find(consumed_);
      if (it == ordered_.end()) return std::nullopt;
      Result r = std::move(it->second);
      ordered_.erase(it);
      ++consumed_;
      --taken_;
      lock.unlock();
      cv_.notify_all();
      return take(r);
    }
    cv_.wait(lock, [&] { return !completed_.empty() || (input_done_ && taken_ == 0); });
    if (completed_.empty()) return std::nullopt;
    Result r = std::move(completed_.front());
    completed_.pop_front();
    --taken_;
    lock.unlock();
    cv_.notify_all();
    return take(r);
  }

 private:
  void work() {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return cancelled_ || input_done_ || taken_ < window_; });
        if (cancelled_ || input_done_) return;
        ++taken_;  // reserve a place in the window before reading the input
      }
      Result r;
      int64_t position;
      bool ended = false, input_failed = false;
      {
        std::lock_guard input_lock(input_mu_);
        if (input_ended_ || cancelled_) {
          release();
          return;
        }
        position = next_position_++;
        try {
          r.element = input_->next();
          ended = !r.element;
        } catch (...) {
          r.error = std::current_exception();
          input_failed = true;
        }
        if (ended || input_failed) input_ended_ = true;
      }
      if (ended) {
        std::lock_guard lock(mu_);
        input_done_ = true;
        end_position_ = position;
        --taken_;
        cv_.notify_all();
        return;
      }
      if (!input_failed && !cancelled_) {
        try {
          r.element = fn_(std::move(*r.element));
        } catch (...) {
          r.error = std::current_exception();
          r.element.reset();
        }
      }
      std::lock_guard lock(mu_);
      if (input_failed) {  // the input's error is its last element
        input_done_ = true;
        end_position_ = position + 1;
      }
      if (deterministic_) {
        ordered_.emplace(position, std::move(r));
      } else {
        completed_.push_back(std::move(r));
      }
      cv_.notify_all();
      if (input_failed) return;
    }
  }

  void release() {
    std::lock_guard lock(mu_);
    --taken_;
    cv_.notify_all();
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  std::unique_ptr<IteratorImpl> input_;
  Dataset::MapFn fn_;
  const bool deterministic_;
  const int64_t window_;
  std::vector<std::thread> workers_;

  std::mutex input_mu_;  // the input, next_position_ and input_ended_
  int64_t next_position_ = 0;
  bool input_ended_ = false;

  std::mutex mu_;  // everything below
  std::condition_variable cv_;
  std::atomic<bool> cancelled_ = false;  // written under mu_
  bool input_done_ = false;
  int64_t end_position_ = -1;  // the number of results, once the input is done
  int64_t taken_ = 0;          // elements taken from the input and not yet consumed
  int64_t consumed_ = 0;
  std::map<int64_t, Result> ordered_;  // deterministic: results by position
  std::deque<Result> completed_;       // otherwise: results in the order they finished
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

class PrefetchIterator : public IteratorImpl {
 public:
  PrefetchIterator(std::unique_ptr<IteratorImpl> input, int64_t buffer_size)
      : input_(std::move(input)), capacity_(static_cast<size_t>(buffer_size)) {
    producer_ = std::thread([this] { produce(); });
  }
  ~PrefetchIterator() override {
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    producer_.join();
  }

  std::optional<Element> next() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || ended_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      return std::nullopt;
    }
    Element e = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    cv_.notify_all();
    return e;
  }

 private:
  void produce() {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return cancelled_ || ready_.size() < capacity_; });
        if (cancelled_) return;
      }
      std::optional<Element> e;
      std::exception_ptr error;
      try {
        e = input_->next();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(mu_);
      if (e) {
        ready_.push_back(std::move(*e));
      } else {
        ended_ = true;
        error_ = error;
      }
      cv_.notify_all();
      if (ended_) return;
    }
  }

  std::unique_ptr<IteratorImpl> input_;
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Element> ready_;
  bool ended_ = false;  // the input ended or failed (error_); nothing more comes after ready_
  std::exception_ptr error_;
  bool cancelled_ = false;
  std::thread producer_;  // last: starts after everything it uses is constructed
};

class PrefetchNode : public DatasetNode {
 public:
  PrefetchNode(NodePtr input, int64_t buffer_size)
      : input_(std::move(input)), buffer_size_(buffer_size) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    return std::make_unique<PrefetchIterator>(input_->make_iterator(epoch), buffer_size_);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string describe() const override { return input_->describe(); }

 private:
  NodePtr input_;
  int64_t buffer_size_;
};

}  // namespace

NodePtr make_parallel_map_node(NodePtr input, Dataset::MapFn fn, int64_t threads,
                               bool deterministic) {
  return std::make_shared<ParallelMapNode>(std::move(input), std::move(fn), threads,
                                           deterministic);
}

NodePtr make_prefetch_node(NodePtr input, int64_t buffer_size) {
  return std::make_shared<PrefetchNode>(std::move(input), buffer_size);
}

}  // namespace kiln::data::detail

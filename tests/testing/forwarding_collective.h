// A communicator that passes every collective on to another one, for tests and benchmarks that
// count or time a step's all_reduces (override all_reduce_through).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "kiln/distribute/collective.h"

namespace kiln::testing {

class ForwardingCollective : public distribute::Collective {
 public:
  explicit ForwardingCollective(std::unique_ptr<Collective> inner)
      : Collective({.timeout = inner->timeout()}), inner_(std::move(inner)) {}
  ~ForwardingCollective() override { stop_async(); }  // its thread calls run()
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  std::string backend() const override { return inner_->backend(); }

 protected:
  // One all_reduce of this replica's `x`: the inner communicator's.
  virtual Tensor all_reduce_through(const Tensor& x, distribute::ReduceOp op) {
    return inner_->all_reduce(x, op);
  }

  Tensor run(const Call& call, const Tensor& x, std::chrono::steady_clock::time_point) final {
    using distribute::CollectiveKind;
    switch (call.kind) {
      case CollectiveKind::kAllReduce: return all_reduce_through(x, call.op);
      case CollectiveKind::kAllGather: return inner_->all_gather(x);
      case CollectiveKind::kReduceScatter: return inner_->reduce_scatter(x, call.op);
      case CollectiveKind::kBroadcast: return inner_->broadcast(x, call.root);
      case CollectiveKind::kBarrier: inner_->barrier(); return Tensor();
    }
    return Tensor();
  }

 private:
  std::unique_ptr<Collective> inner_;
};

}  // namespace kiln::testing

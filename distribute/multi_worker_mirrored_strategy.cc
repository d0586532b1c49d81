// MultiWorkerMirroredStrategy: one replica per worker on the job's communicator; the start-up
// agreement check exchanges every worker's facts (as text) with two all_gathers.
#include "kiln/distribute/multi_worker_mirrored_strategy.h"

#include <cstring>
#include <string>
#include <vector>

#include "kiln/distribute/ops.h"
#include "kiln/error.h"

namespace kiln::distribute {

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(CollectiveOptions options)
    : comm_(make_mpi_collective(options)) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(std::unique_ptr<Collective> communicator)
    : comm_(std::move(communicator)) {
  if (!comm_) {
    throw Error(ErrorCode::kInvalidArgument, "MultiWorkerMirroredStrategy: null communicator");
  }
}

MultiWorkerMirroredStrategy::~MultiWorkerMirroredStrategy() = default;

std::string MultiWorkerMirroredStrategy::name() const {
  return "MultiWorkerMirroredStrategy(worker " + std::to_string(comm_->rank()) + " of " +
         std::to_string(comm_->size()) + ", " + comm_->backend() + ")";
}

void MultiWorkerMirroredStrategy::run_local(const std::function<void(int local_replica)>& fn) {
  try {
    CollectiveScope scope(*comm_);
    fn(0);
  } catch (const Error& e) {
    throw Error(e.code(), "worker " + std::to_string(comm_->rank()) + " of " +
                              std::to_string(comm_->size()) + ": " + e.what());
  }
}

void MultiWorkerMirroredStrategy::check_consistent(
    const std::vector<std::pair<std::string, std::string>>& facts) {
  // Every worker's facts as one text, "name\tvalue\n" each; gathered with their lengths.
  std::string mine;
  for (const auto& [name, value] : facts) mine += name + '\t' + value + '\n';
  const int n = comm_->size();
  Tensor lengths =
      comm_->all_gather(Tensor::from_vector<int64_t>({static_cast<int64_t>(mine.size())}, {1}));
  Tensor bytes = Tensor::empty(DType::u8, {static_cast<int64_t>(mine.size())});
  if (!mine.empty()) std::memcpy(bytes.raw_mutable_data(), mine.data(), mine.size());
  Tensor all = comm_->all_gather(bytes);
  std::vector<std::vector<std::pair<std::string, std::string>>> theirs(n);
  const char* text = static_cast<const char*>(all.raw_data());
  int64_t at = 0;
  for (int w = 0; w < n; ++w) {
    const int64_t length = lengths.data<int64_t>()[w];
    std::string s(text + at, static_cast<size_t>(length));
    at += length;
    for (size_t line = 0; line < s.size();) {
      const size_t tab = s.find('\t', line), end = s.find('\n', line);
      theirs[w].emplace_back(s.substr(line, tab - line), s.substr(tab + 1, end - tab - 1));
      line = end + 1;
    }
  }
  // The same words on every worker: each fact that differs, with every worker's value.
  std::string differences;
  for (size_t f = 0; f < facts.size(); ++f) {
    bool same = true;
    for (int w = 0; w < n; ++w)
      same = same && theirs[w].size() == facts.size() && theirs[w][f] == theirs[0][f];
    if (same) continue;
    differences += "\n  " + facts[f].first + ":";
    for (int w = 0; w < n; ++w) {
      differences += " worker " + std::to_string(w) + " has " +
                     (f < theirs[w].size() ? theirs[w][f].second : std::string("nothing")) +
                     (w + 1 < n ? ";" : "");
    }
  }
  if (differences.empty()) return;
  throw Error(ErrorCode::kFailedPrecondition,
              "MultiWorkerMirroredStrategy: the " + std::to_string(n) +
                  " workers were started with different settings (every worker must run the "
                  "same program with the same arguments):" +
                  differences);
}

void MultiWorkerMirroredStrategy::broadcast_from_chief(std::vector<Tensor>& values) {
  for (Tensor& v : values) v = comm_->broadcast(v, 0);
}

}  // namespace kiln::distribute

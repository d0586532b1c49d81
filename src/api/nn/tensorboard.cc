// The TensorBoard callback: epoch and batch scalars, weight, weight-update and gradient
// (of the epoch's last batch) histograms and
// the inference graph, written with io::EventWriter into log_dir/train and log_dir/validation.
#include "kiln/nn/tensorboard.h"

#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "kiln/io/summary.h"
#include "kiln/nn/model.h"
#include "kiln/ops.h"
#include "src/api/nn/writable_dir.h"

namespace kiln::nn {
namespace {

[[noreturn]] void bad_update_freq(const std::string& got) {
  throw Error(ErrorCode::kInvalidArgument,
              "TensorBoard: update_freq must be \"epoch\", \"batch\" or a number of batches >= 1, "
              "got " +
                  got);
}

// Batches between batch-level writes; 0: none ("epoch").
int64_t batches_between_writes(const UpdateFreq& freq) {
  if (const int64_t* n = std::get_if<int64_t>(&freq)) {
    if (*n < 1) bad_update_freq(std::to_string(*n));
    return *n;
  }
  const std::string& when = std::get<std::string>(freq);
  if (when == "epoch") return 0;
  if (when == "batch") return 1;
  bad_update_freq("\"" + when + "\"");
}

// A copy that later in-place updates of the variable cannot change.
Tensor snapshot(const Tensor& t) {
  Tensor out = Tensor::empty(t.dtype(), t.shape());
  if (t.nbytes() > 0) std::memcpy(out.raw_mutable_data(), t.raw_data(), t.nbytes());
  return out;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

struct TensorBoard::State {
  std::string log_dir;
  TensorBoardOptions options;
  int64_t batches_between_writes = 0;
  std::optional<io::EventWriter> train, validation;
  // Trainable variables and their values at the start of a histogram epoch.
  std::vector<std::pair<Variable, Tensor>> epoch_start;

  std::string run_dir(const char* run) const {
    std::string dir = log_dir;
    if (!dir.empty() && dir.back() != '/') dir += '/';
    return dir + run;
  }
  io::EventWriter& train_writer() {
    if (!train) train.emplace(run_dir("train"));
    return *train;
  }
  io::EventWriter& validation_writer() {
    if (!validation) validation.emplace(run_dir("validation"));
    return *validation;
  }
  void close() {
    std::optional<io::EventWriter> t = std::move(train), v = std::move(validation);
    train.reset();
    validation.reset();
    if (t) t->close();
    if (v) v->close();
  }
};

TensorBoard::TensorBoard(std::string log_dir, TensorBoardOptions options)
    : state_(std::make_unique<State>()) {
  if (log_dir.empty()) throw Error(ErrorCode::kInvalidArgument, "TensorBoard: log_dir is empty");
  if (options.histogram_freq < 0) {
    throw Error(ErrorCode::kInvalidArgument, "TensorBoard: histogram_freq must be >= 0, got " +
                                                 std::to_string(options.histogram_freq));
  }
  state_->batches_between_writes = batches_between_writes(options.update_freq);
  state_->log_dir = std::move(log_dir);
  state_->options = std::move(options);
}

TensorBoard::~TensorBoard() = default;
TensorBoard::TensorBoard(TensorBoard&&) noexcept = default;
TensorBoard& TensorBoard::operator=(TensorBoard&&) noexcept = default;

const std::string& TensorBoard::log_dir() const { return state_->log_dir; }

void TensorBoard::on_train_begin(Logs&) {
  state_->close();  // a previous fit that ended by an exception left its files open
  detail::check_writable(state_->log_dir, "TensorBoard");
  io::EventWriter& train = state_->train_writer();
  if (!state_->options.write_graph || !model()) return;
  std::optional<TensorType> input = model()->input_type();
  if (!input || input->shape.empty()) return;
  Shape features(input->shape.begin() + 1, input->shape.end());
  train.add_graph(model()->inference_graph(features, input->dtype).graph);
  train.flush();
}

void TensorBoard::on_train_end(Logs&) { state_->close(); }

void TensorBoard::on_epoch_begin(int epoch, Logs&) {
  state_->epoch_start.clear();
  const int freq = state_->options.histogram_freq;
  if (freq == 0 || epoch % freq != 0 || !model()) return;
  for (const Variable& v : model()->trainable_weights())
    state_->epoch_start.emplace_back(v, snapshot(v.value()));
}

void TensorBoard::on_epoch_end(int epoch, Logs& logs) {
  io::EventWriter& train = state_->train_writer();
  for (const auto& [name, value] : logs) {
    if (name == "learning_rate") continue;  // written below, from the optimizer
    if (starts_with(name, "val_")) {
      state_->validation_writer().add_scalar("epoch_" + name.substr(4), value, epoch);
    } else {
      train.add_scalar("epoch_" + name, value, epoch);
    }
  }
  if (model()) train.add_scalar("epoch_learning_rate", model()->optimizer().learning_rate(), epoch);

  const int freq = state_->options.histogram_freq;
  if (freq > 0 && epoch % freq == 0 && model()) {
    auto histogram = [&](const std::string& tag, const Tensor& values) {
      try {
        train.add_histogram(tag, values, epoch);
      } catch (const Error& e) {
        // Non-finite weights: training has diverged; TerminateOnNaN is the callback to stop it.
        if (e.code() != ErrorCode::kInvalidArgument) throw;
      }
    };
    for (const Variable& v : model()->trainable_weights()) histogram(v.name(), v.value());
    for (const auto& [v, start] : state_->epoch_start)
      histogram(v.name() + "/update", sub(v.value(), start));
    for (const auto& [v, grad] : model()->last_gradients()) histogram(v.name() + "/gradient", grad);
  }
  state_->epoch_start.clear();
  train.flush();
  if (state_->validation) state_->validation->flush();
}

void TensorBoard::on_train_batch_end(int64_t, Logs& logs) {
  const int64_t every = state_->batches_between_writes;
  if (every == 0 || !model()) return;
  const int64_t step = model()->optimizer().iterations();
  if (step % every != 0) return;
  io::EventWriter& train = state_->train_writer();
  for (const auto& [name, value] : logs) {
    if (starts_with(name, "batch_")) continue;  // the last batch's own loss; Keras logs the mean
    train.add_scalar("batch_" + name, value, step);
  }
}

}  // namespace kiln::nn

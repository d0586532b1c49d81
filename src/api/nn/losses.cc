// Losses (Keras semantics): per-example values with ops, so they run eagerly or record into a
// step graph; operator() averages them over the batch.
#include "kiln/nn/losses.h"

#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>

#include "kiln/ops.h"

namespace kiln::nn {
namespace {

constexpr double kEps = 1e-7;  // Keras's backend.epsilon(): probabilities are clipped to it

[[noreturn]] void fail(const std::string& loss, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, loss + ": " + message);
}

std::string shapes(const Tensor& y_true, const Tensor& y_pred) {
  return "(y_true " + shape_str(y_true.shape()) + ", y_pred " + shape_str(y_pred.shape()) + ")";
}

void check_defined(const std::string& loss, const Tensor& y_true, const Tensor& y_pred) {
  if (!y_true.defined() || !y_pred.defined()) fail(loss, "undefined y_true or y_pred");
}

// Scores compute in a floating type: integer predictions become f32.
Tensor as_float(const Tensor& x) { return is_floating(x.dtype()) ? x : convert(x, f32); }

// Dimensions must agree wherever both are known.
bool compatible(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != kUnknownDim && b[i] != kUnknownDim && a[i] != b[i]) return false;
  }
  return true;
}

// Keras's squeeze_or_expand_to_same_rank: labels [batch] against predictions [batch, 1] (or
// the reverse) are brought to the same rank; then the shapes must match. Labels take the
// predictions' dtype.
std::pair<Tensor, Tensor> aligned(const std::string& loss, const Tensor& y_true,
                                  const Tensor& y_pred) {
  check_defined(loss, y_true, y_pred);
  Tensor t = y_true;
  Tensor p = as_float(y_pred);
  if (t.rank() == p.rank() - 1 && p.rank() > 0 && p.dim(-1) == 1) t = expand_dims(t, -1);
  if (p.rank() == t.rank() - 1 && t.rank() > 0 && t.dim(-1) == 1) p = expand_dims(p, -1);
  if (!compatible(t.shape(), p.shape()))
    fail(loss, "shapes do not match " + shapes(y_true, y_pred));
  return {convert(t, p.dtype()), p};
}

// One value per example: the mean over the last axis when there is a feature axis.
Tensor per_row(const Tensor& x) { return x.rank() >= 2 ? mean(x, {-1}) : x; }

int64_t known_classes(const std::string& loss, const Tensor& y_true, const Tensor& y_pred) {
  if (y_pred.rank() < 1) fail(loss, "y_pred needs a class axis " + shapes(y_true, y_pred));
  int64_t classes = y_pred.dim(-1);
  if (classes == kUnknownDim) {
    fail(loss, "the number of classes (last dimension of y_pred) must be known " +
                   shapes(y_true, y_pred));
  }
  return classes;
}

// Probabilities normalised over the class axis and clipped away from 0 and 1, as Keras does.
Tensor clipped_probabilities(const Tensor& p) {
  return clamp(p / sum(p, {-1}, true), kEps, 1 - kEps);
}

// from_logits=true on an output the model already squashed applies the activation twice: the
// loss still falls, but slowly and towards the wrong optimum (Keras warns about it too).
std::vector<std::string> logits_advice(const std::string& loss, bool from_logits,
                                       const std::string& output_activation,
                                       const std::string& squashing) {
  if (!from_logits || output_activation != squashing) return {};
  return {loss + " was built with from_logits=true but the model's last layer ends in " +
          squashing + ", so " + squashing +
          " is applied twice and training goes badly: remove the last layer's " + squashing +
          " activation (keep the loss's from_logits=true), or build the loss with "
          "from_logits=false"};
}

}  // namespace

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  return convert(mean(per_example(y_true, y_pred)), f32);
}

Tensor SparseCategoricalCrossentropy::per_example(const Tensor& y_true,
                                                  const Tensor& y_pred) const {
  const std::string loss = name();
  check_defined(loss, y_true, y_pred);
  int64_t classes = known_classes(loss, y_true, y_pred);
  Tensor labels = y_true;
  if (labels.rank() == y_pred.rank() && labels.dim(-1) == 1) labels = squeeze(labels, {-1});
  Shape batch(y_pred.shape().begin(), y_pred.shape().end() - 1);
  if (!compatible(labels.shape(), batch)) {
    if (labels.rank() == y_pred.rank() && labels.dim(-1) == classes) {
      fail(loss, "labels look one-hot " + shapes(y_true, y_pred) +
                     ": sparse_categorical_crossentropy takes class indices (shape [batch]); "
                     "for one-hot labels use categorical_crossentropy, or pass the indices "
                     "(argmax of the one-hot rows)");
    }
    fail(loss,
         "labels must have the shape of y_pred without its class axis " + shapes(y_true, y_pred));
  }
  if (labels.dtype() != i32 && labels.dtype() != i64) labels = convert(labels, i64);
  if (!labels.is_symbolic()) {
    std::vector<int64_t> values = labels.to_vector<int64_t>();
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] < 0 || values[i] >= classes) {
        fail(loss, "label " + std::to_string(values[i]) + " at index " + std::to_string(i) +
                       " is out of range for " + std::to_string(classes) + " classes " +
                       shapes(y_true, y_pred));
      }
    }
  }
  Tensor scores = as_float(y_pred);
  Tensor mask = one_hot(labels, classes, scores.dtype());
  if (from_logits_) return logsumexp(scores, {-1}) - sum(mask * scores, {-1});
  return -log(sum(mask * clipped_probabilities(scores), {-1}));
}

std::vector<std::string> SparseCategoricalCrossentropy::advice(
    const Tensor&, const std::string& output_activation) const {
  return logits_advice(name(), from_logits_, output_activation, "softmax");
}

Tensor CategoricalCrossentropy::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  const std::string loss = name();
  check_defined(loss, y_true, y_pred);
  int64_t classes = known_classes(loss, y_true, y_pred);
  if (!(label_smoothing_ >= 0 && label_smoothing_ <= 1)) {
    fail(loss, "label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing_));
  }
  Tensor scores = as_float(y_pred);
  if (!compatible(y_true.shape(), scores.shape())) {
    fail(loss, "y_true must have the shape of y_pred " + shapes(y_true, y_pred));
  }
  Tensor labels = convert(y_true, scores.dtype());
  if (label_smoothing_ > 0) {
    labels = labels * (1 - label_smoothing_) + label_smoothing_ / static_cast<double>(classes);
  }
  if (from_logits_) return -sum(labels * log_softmax(scores, -1), {-1});
  return -sum(labels * log(clipped_probabilities(scores)), {-1});
}

std::vector<std::string> CategoricalCrossentropy::advice(
    const Tensor&, const std::string& output_activation) const {
  return logits_advice(name(), from_logits_, output_activation, "softmax");
}

std::vector<std::string> BinaryCrossentropy::advice(const Tensor& y_true,
                                                    const std::string& output_activation) const {
  std::vector<std::string> out = logits_advice(name(), from_logits_, output_activation, "sigmoid");
  if (!y_true.defined() || y_true.is_symbolic()) return out;
  std::vector<double> labels = y_true.to_vector<double>();
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= 0 && labels[i] <= 1) continue;
    std::ostringstream os;
    os << name() << " got label " << labels[i] << " (at index " << i
       << " of the batch), outside [0, 1]: binary cross-entropy needs labels in [0, 1] "
          "(probabilities of the positive class); for class indices use "
          "sparse_categorical_crossentropy, else rescale the labels into [0, 1]";
    out.push_back(os.str());
    break;
  }
  return out;
}

Tensor BinaryCrossentropy::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  auto [z, x] = aligned(name(), y_true, y_pred);
  if (from_logits_) {
    // max(x, 0) - x z + log(1 + exp(-|x|)): no overflow for large |x|.
    return per_row(maximum(x, scalar_like(0, x)) - x * z + log1p(exp(-abs(x))));
  }
  Tensor p = clamp(x, kEps, 1 - kEps);
  return per_row(-(z * log(p) + (1.0 - z) * log(1.0 - p)));
}

Tensor MeanSquaredError::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  auto [t, p] = aligned(name(), y_true, y_pred);
  return per_row(square(p - t));
}

Tensor Huber::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  if (!(delta_ >= 0)) fail(name(), "delta must be >= 0, got " + std::to_string(delta_));
  auto [t, p] = aligned(name(), y_true, y_pred);
  Tensor error = p - t;
  Tensor abs_error = abs(error);
  Tensor quadratic = square(error) * 0.5;
  Tensor linear = abs_error * delta_ - 0.5 * delta_ * delta_;
  return per_row(where(abs_error <= scalar_like(delta_, abs_error), quadratic, linear));
}

// ---- the registry of loss classes ----------------------------------------------------------

namespace {

struct LossRegistry {
  std::mutex mu;
  std::map<std::string, LossFactory> factories;
};

LossRegistry& loss_registry() {
  static LossRegistry* r = new LossRegistry;  // never destroyed: registrations run at load time
  return *r;
}

const bool kBuiltInLosses = [] {
  register_loss("sparse_categorical_crossentropy", [](const Attrs& c) {
    return std::make_shared<SparseCategoricalCrossentropy>(c.get_bool("from_logits"));
  });
  register_loss("categorical_crossentropy", [](const Attrs& c) {
    return std::make_shared<CategoricalCrossentropy>(c.get_bool("from_logits"),
                                                     c.get_float("label_smoothing"));
  });
  register_loss("binary_crossentropy", [](const Attrs& c) {
    return std::make_shared<BinaryCrossentropy>(c.get_bool("from_logits"));
  });
  register_loss("mean_squared_error",
                [](const Attrs&) { return std::make_shared<MeanSquaredError>(); });
  register_loss("huber",
                [](const Attrs& c) { return std::make_shared<Huber>(c.get_float("delta")); });
  return true;
}();

}  // namespace

void register_loss(const std::string& name, LossFactory factory, bool replace) {
  if (name.empty() || !factory) {
    throw Error(ErrorCode::kInvalidArgument,
                "register_loss: needs a class name and a factory, got '" + name + "'");
  }
  LossRegistry& r = loss_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!replace && r.factories.count(name)) {
    throw Error(ErrorCode::kAlreadyExists, "register_loss: loss '" + name +
                                               "' is registered already (pass replace=true to "
                                               "override it)");
  }
  r.factories[name] = std::move(factory);
}

std::shared_ptr<Loss> loss_from_config(const std::string& name, const Attrs& config) {
  LossFactory factory;
  {
    LossRegistry& r = loss_registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    throw Error(ErrorCode::kNotFound, "loss '" + name +
                                          "' is not registered in this program: register it "
                                          "with kiln::nn::register_loss before loading");
  }
  try {
    std::shared_ptr<Loss> loss = factory(config);
    if (!loss) throw Error(ErrorCode::kInternal, "its factory returned no loss");
    return loss;
  } catch (const Error& e) {
    throw Error(e.code(), "loss '" + name + "': " + e.what());
  }
}

}  // namespace kiln::nn

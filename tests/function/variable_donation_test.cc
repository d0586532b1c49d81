// Variables updated in place by compiled steps (kiln::function and Model::fit donate each
// variable's buffer to the update): the buffer is reused across steps, a Tensor the user kept
// from value() is a snapshot, and results are bit-identical to the path without donation (and
// to the interpreter where the compiled program sums in the same order).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/autodiff.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/variable.h"

namespace kiln {
namespace {

Tensor ramp(Shape shape, float scale, float offset) {
  std::vector<float> v(num_elements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = offset + scale * static_cast<float>(i % 11);
  return Tensor::from_vector(v, shape);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// A linear least-squares model trained by SGD or Adam inside kiln::function.
struct Trainer {
  Variable w{ramp({6, 1}, 0.05f, -0.2f), "w"};
  Variable m{zeros({6, 1}), "w/m"};
  Variable v{zeros({6, 1}), "w/v"};
  bool adam;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> step;

  Trainer(ExecutionMode mode, bool use_adam) : adam(use_adam) {
    auto body = [this](const Tensor& x, const Tensor& y, const Tensor& lr, const Tensor& it) {
      Tensor wv = w.value();
      Tensor err = matmul(x, wv) - y;
      Tensor loss = mean(err * err);
      Tensor grad = gradients(loss, {wv})[0];
      if (adam) {
        optim::Adam opt(0.01);
        auto [new_w, slots] = opt.apply(wv, grad, {m.value(), v.value()}, lr, it);
        w.assign(new_w);
        m.assign(slots[0]);
        v.assign(slots[1]);
      } else {
        w.assign(wv - grad * lr);
      }
      return loss;
    };
    auto f = function(body, {.name = "train", .mode = mode});
    step = [f](const std::vector<Tensor>& args) { return f.call(args); };
  }

  void run(int steps) {
    Tensor x = ramp({16, 6}, 0.1f, -0.5f);
    Tensor y = ramp({16, 1}, 0.3f, -1.0f);
    for (int i = 0; i < steps; ++i)
      step({x, y, Tensor::scalar<float>(0.05f), Tensor::scalar<float>(i + 1.0f)});
  }
};

class VariableDonation : public testing::TestWithParam<bool> {};  // SGD, Adam

TEST_P(VariableDonation, FunctionUpdatesInPlaceAndMatchesTheInterpreter) {
  Trainer compiled(ExecutionMode::kCompiled, GetParam());
  Trainer interpreted(ExecutionMode::kInterpreted, GetParam());
  const void* w_data = compiled.w.value().raw_data();
  const void* m_data = compiled.m.value().raw_data();
  compiled.run(1);
  interpreted.run(1);
  EXPECT_EQ(compiled.w.value().raw_data(), w_data);
  if (GetParam()) EXPECT_EQ(compiled.m.value().raw_data(), m_data);
  compiled.run(5);
  interpreted.run(5);
  EXPECT_EQ(compiled.w.value().raw_data(), w_data);
  EXPECT_TRUE(same_bits(compiled.w.value(), interpreted.w.value()))
      << compiled.w.value() << " vs " << interpreted.w.value();
  EXPECT_TRUE(same_bits(compiled.m.value(), interpreted.m.value()));
  EXPECT_TRUE(same_bits(compiled.v.value(), interpreted.v.value()));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, VariableDonation, testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Adam" : "SGD"; });

TEST(VariableDonation, AValueKeptByTheUserIsASnapshot) {
  Trainer t(ExecutionMode::kCompiled, /*use_adam=*/false);
  t.run(1);
  Tensor kept = t.w.value();  // a copy: shares the buffer until the next update
  std::vector<float> before = kept.to_vector<float>();
  const void* old_data = kept.raw_data();
  t.run(1);
  EXPECT_EQ(kept.to_vector<float>(), before);  // unchanged: the update went elsewhere
  EXPECT_NE(t.w.value().raw_data(), old_data);
  EXPECT_NE(t.w.value().to_vector<float>(), before);
  // A view over the variable's storage is a snapshot too.
  Tensor view = reshape(t.w.value(), {6});
  std::vector<float> viewed = view.to_vector<float>();
  t.run(1);
  EXPECT_EQ(view.to_vector<float>(), viewed);
  // Once the user drops them, updates are in place again.
  kept = Tensor();
  view = Tensor();
  t.run(1);
  const void* data = t.w.value().raw_data();
  t.run(3);
  EXPECT_EQ(t.w.value().raw_data(), data);
  // A reference follows the variable (it names the variable's current value).
  const Tensor& ref = t.w.value();
  std::vector<float> now = ref.to_vector<float>();
  t.run(1);
  EXPECT_NE(ref.to_vector<float>(), now);
}

TEST(VariableDonation, AFailedCallLeavesTheVariable) {
  Variable w(ramp({4}, 1, 0), "w");
  auto f = function(
      [&](const Tensor& idx) {
        Tensor wv = w.value();
        w.assign(wv + 1.0);
        return gather(wv, idx);
      },
      {.mode = ExecutionMode::kCompiled});
  f(Tensor::from_vector<int64_t>({1}));
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_THROW(f(Tensor::from_vector<int64_t>({9})), Error);  // index out of range
  ASSERT_TRUE(w.value().defined());
  EXPECT_EQ(w.value().shape(), (Shape{4}));
}

// Keeps a copy of every weight's value before each batch: the step must then refuse every
// donation (copy-on-write), which is the path without donation.
class HoldWeights : public nn::Callback {
 public:
  void on_train_batch_begin(int64_t, nn::Logs&) override {
    held.clear();
    for (const Variable& v : model()->weights()) held.push_back(v.value());
  }
  std::vector<Tensor> held;
};

// Model::fit with SGD and Adam: weights updated in place, bit-identical to fit without
// donation, and equal to the interpreter to rounding (the compiled program sums reductions in
// another order, with or without donation).
TEST(VariableDonation, ModelFitUpdatesWeightsInPlace) {
  Tensor x = ramp({32, 5}, 0.1f, -0.5f);
  Tensor y = ramp({32, 2}, 0.2f, -1.0f);
  for (bool adam : {false, true}) {
    auto train = [&](ExecutionMode mode, bool hold, std::vector<const void*>* data) {
      nn::Sequential model({nn::Dense(3, "relu"), nn::Dense(2)});
      model.set_seed(7);
      model.set_execution_mode(mode);
      model.compile(
          adam ? optim::OptimizerRef(optim::Adam(0.01)) : optim::OptimizerRef(optim::SGD(0.05)),
          nn::MeanSquaredError());
      nn::FitOptions options{.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0};
      if (hold) options.callbacks.push_back(HoldWeights());
      model.fit(x, y, options);
      if (data) {
        for (const Variable& v : model.weights()) data->push_back(v.value().raw_data());
      }
      model.fit(x, y, options);
      std::vector<Tensor> out;
      for (const Variable& v : model.weights()) {
        if (data) EXPECT_EQ(v.value().raw_data(), (*data)[out.size()]) << v.name();
        out.push_back(v.value());
      }
      return out;
    };
    std::vector<const void*> data;
    std::vector<Tensor> donated = train(ExecutionMode::kCompiled, false, &data);
    std::vector<Tensor> fresh = train(ExecutionMode::kCompiled, true, nullptr);
    std::vector<Tensor> interpreted = train(ExecutionMode::kInterpreted, false, nullptr);
    ASSERT_EQ(donated.size(), interpreted.size());
    for (size_t k = 0; k < donated.size(); ++k) {
      std::string what = (adam ? "Adam weight " : "SGD weight ") + std::to_string(k);
      EXPECT_TRUE(same_bits(donated[k], fresh[k])) << what;
      std::vector<float> a = donated[k].to_vector<float>(), b = interpreted[k].to_vector<float>();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << what;
    }
  }
}

}  // namespace
}  // namespace kiln

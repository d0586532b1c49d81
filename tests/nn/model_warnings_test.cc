// fit and evaluate warn, once per call, about setups that run but train badly: from_logits=true
// on a softmax/sigmoid output, binary labels outside [0, 1]. A correct setup gets no warning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/kiln.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/losses.h"
#include "kiln/nn/model.h"
#include "kiln/warning.h"
#include "tests/testing/warnings.h"

namespace kiln::nn {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

using testing_util::CaptureWarnings;

// 8 examples of 2 features; labels alternate 0, 1.
Tensor features() { return Tensor::from_vector(std::vector<float>(16, 0.5f), {8, 2}); }
Tensor class_labels() { return Tensor::from_list<int32_t>({0, 1, 0, 1, 0, 1, 0, 1}); }

FitOptions quiet(int epochs = 1) {
  FitOptions o;
  o.epochs = epochs;
  o.batch_size = 4;
  o.verbose = 0;
  return o;
}

TEST(ModelWarnings, FromLogitsOnASoftmaxOutputIsWarnedOncePerFitAndEvaluate) {
  Sequential model({Dense(4, "relu"), Dense(2, "softmax")}, "classifier");
  model.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(/*from_logits=*/true));
  CaptureWarnings w;
  FitOptions o = quiet(/*epochs=*/3);
  o.validation_data = std::make_pair(features(), class_labels());
  model.fit(features(), class_labels(), o);
  ASSERT_EQ(w.messages.size(), 1u);  // not per batch, epoch or validation run
  EXPECT_THAT(w.messages[0],
              AllOf(HasSubstr("fit: model 'classifier'"),
                    HasSubstr("sparse_categorical_crossentropy"), HasSubstr("from_logits=true"),
                    HasSubstr("softmax"), HasSubstr("remove the last layer's softmax")));
  model.evaluate(features(), class_labels(), /*batch_size=*/2);
  ASSERT_EQ(w.messages.size(), 2u);
  EXPECT_THAT(w.messages[1], HasSubstr("evaluate: model 'classifier'"));
}

TEST(ModelWarnings, FromLogitsOnAFunctionalSoftmaxActivationIsWarned) {
  Tensor in = Input({2});
  Tensor out = Activation("softmax")(Dense(2)(in));
  Model model(in, out, "functional");
  Tensor onehot = Tensor::from_vector(
      std::vector<float>{1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1}, {8, 2});
  model.compile(optim::SGD(0.1), CategoricalCrossentropy(/*from_logits=*/true));
  CaptureWarnings w;
  model.fit(features(), onehot, quiet());
  ASSERT_EQ(w.messages.size(), 1u);
  EXPECT_THAT(w.messages[0], AllOf(HasSubstr("model 'functional'"),
                                   HasSubstr("categorical_crossentropy"), HasSubstr("softmax")));
}

TEST(ModelWarnings, BinaryFromLogitsOnASigmoidOutputIsWarned) {
  Sequential model({Dense(1, "sigmoid")}, "binary");
  model.compile(optim::SGD(0.1), BinaryCrossentropy(/*from_logits=*/true));
  CaptureWarnings w;
  model.fit(features(), class_labels(), quiet());
  ASSERT_EQ(w.messages.size(), 1u);
  EXPECT_THAT(w.messages[0], AllOf(HasSubstr("binary_crossentropy"), HasSubstr("sigmoid"),
                                   HasSubstr("from_logits=false")));
}

TEST(ModelWarnings, BinaryLabelsOutsideZeroOneAreWarned) {
  Sequential model({Dense(1, "sigmoid")}, "binary");
  model.compile(optim::SGD(0.1), BinaryCrossentropy());
  CaptureWarnings w;
  Tensor labels = Tensor::from_list<int32_t>({0, 1, 2, 1, 0, 1, 0, 1});  // a 2 in the first batch
  FitOptions o = quiet(/*epochs=*/2);
  o.shuffle = false;  // only the first batch is looked at
  model.fit(features(), labels, o);
  ASSERT_EQ(w.messages.size(), 1u);
  EXPECT_THAT(w.messages[0],
              AllOf(HasSubstr("fit: model 'binary'"), HasSubstr("label 2"),
                    HasSubstr("outside [0, 1]"), HasSubstr("sparse_categorical_crossentropy")));
  model.evaluate(features(), labels, /*batch_size=*/8);
  EXPECT_EQ(w.messages.size(), 2u);
}

TEST(ModelWarnings, FitOnADatasetWarnsOnceAtItsFirstBatch) {
  Sequential model({Dense(1, "sigmoid")}, "binary");
  model.compile(optim::SGD(0.1), BinaryCrossentropy());
  CaptureWarnings w;
  Tensor labels = Tensor::from_list<float>({-1, 0, 1, 1, 0, 1, 0, 1});
  model.fit(data::Dataset::from_tensors({features(), labels}).batch(4), quiet(/*epochs=*/2));
  ASSERT_EQ(w.messages.size(), 1u);
  EXPECT_THAT(w.messages[0], AllOf(HasSubstr("fit: model 'binary'"), HasSubstr("label -1")));
}

TEST(ModelWarnings, CorrectSetupsAreNotWarned) {
  CaptureWarnings w;
  Sequential logits({Dense(2)});
  logits.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(/*from_logits=*/true));
  logits.fit(features(), class_labels(), quiet(2));
  logits.evaluate(features(), class_labels());
  Sequential probabilities({Dense(2, "softmax")});
  probabilities.compile(optim::SGD(0.1), SparseCategoricalCrossentropy());
  probabilities.fit(features(), class_labels(), quiet());
  Sequential binary({Dense(1, "sigmoid")});
  binary.compile(optim::SGD(0.1), BinaryCrossentropy());
  binary.fit(features(), class_labels(), quiet());
  binary.evaluate(features(), class_labels());
  EXPECT_THAT(w.messages, IsEmpty());
}

TEST(ModelWarnings, WithoutAHandlerTheWarningGoesToStderr) {
  Sequential model({Dense(2, "softmax")}, "printed");
  model.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(/*from_logits=*/true));
  testing::internal::CaptureStderr();
  model.fit(features(), class_labels(), quiet(2));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_THAT(err,
              HasSubstr("kiln: warning: fit: model 'printed': sparse_categorical_crossentropy"));
  EXPECT_EQ(err.find("kiln: warning:"), err.rfind("kiln: warning:"));  // once
}

// Not a warning: one-hot labels for the sparse loss are refused, with the fix named.
TEST(ModelWarnings, OneHotLabelsForTheSparseLossAreAnErrorNamingTheFix) {
  Sequential model({Dense(2)});
  model.compile(optim::SGD(0.1), SparseCategoricalCrossentropy(/*from_logits=*/true));
  Tensor onehot = Tensor::from_vector(std::vector<float>(16, 0.0f), {8, 2});
  try {
    model.fit(features(), onehot, quiet());
    FAIL() << "one-hot labels were accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("look one-hot"), HasSubstr("categorical_crossentropy")));
  }
}

}  // namespace
}  // namespace kiln::nn

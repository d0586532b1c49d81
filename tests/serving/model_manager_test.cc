// The model manager: versions found under a base path, selected by policy and label, loaded
// and warmed up before they serve; a corrupt version reported and never replacing a good one;
// requests in flight keeping an unloaded version alive; TF Serving's config file format.
#include "serving/model_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/nn.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::serving {
namespace {

namespace fs = std::filesystem;
using test_values::error_of;
using ::testing::HasSubstr;

class ModelManagerTest : public testing_util::TempDirTest {
 protected:
  // Saves a Dense(2) model on 3 features whose kernel is all `w` as the next version.
  std::string save_version(float w) {
    nn::Sequential model({nn::Dense(2, "", false)});
    model.build({3});
    for (Variable v : model.weights()) v.assign(full(v.value().shape(), w));
    return io::save_model(model, path("m"), {3});
  }
  float predict(const ModelManager& mm, std::optional<int64_t> v = std::nullopt,
                const std::string& label = "") {
    auto s = mm.get("m", v, label);
    return s->model_handle.predict(ones({1, 3})).data<float>()[0];
  }
  ModelSpec spec() const { return {.name = "m", .base_path = path("m")}; }
};

TEST_F(ModelManagerTest, ServesTheNewestVersionAndSwitchesWhenANewOneArrives) {
  save_version(1);
  ModelManager mm({spec()});
  EXPECT_TRUE(mm.poll());
  EXPECT_EQ(predict(mm), 3.0f);
  EXPECT_FALSE(mm.poll());  // nothing new
  save_version(2);
  EXPECT_TRUE(mm.poll());
  EXPECT_EQ(predict(mm), 6.0f);
  std::vector<VersionStatus> st = mm.status("m", std::nullopt);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].version, 2);
  EXPECT_EQ(st[0].state, VersionState::kAvailable);
  EXPECT_EQ(st[1].state, VersionState::kEnd);  // the old one, unloaded
  EXPECT_THAT(error_of([&] { mm.get("m", 1); }),
              HasSubstr("Specific(m, 1) (available versions: 2)"));
}

TEST_F(ModelManagerTest, ACorruptVersionIsReportedAndNeverReplacesAGoodOne) {
  save_version(1);
  ModelManager mm({spec()});
  mm.poll();
  const std::string v2 = save_version(2);
  testing_util::write_file(fs::path(v2) / "saved_model.pb", "not a saved model");
  mm.poll();
  EXPECT_EQ(predict(mm), 3.0f);  // version 1 still serves
  EXPECT_EQ(mm.load_failures(), 1);
  std::vector<VersionStatus> st = mm.status("m", 2);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].state, VersionState::kEnd);
  EXPECT_THAT(st[0].error, HasSubstr("saved_model.pb"));
  mm.poll();
  EXPECT_EQ(mm.load_failures(), 1);  // not retried until its directory changes
}

TEST_F(ModelManagerTest, AnUnloadedVersionLivesUntilItsRequestsFinish) {
  save_version(1);
  ModelManager mm({spec()});
  mm.poll();
  std::shared_ptr<const Servable> held = mm.get("m", std::nullopt);
  save_version(2);
  mm.poll();
  EXPECT_EQ(held->version, 1);
  EXPECT_EQ(held->model_handle.predict(ones({1, 3})).data<float>()[0], 3.0f);
}

TEST_F(ModelManagerTest, PoliciesAndLabels) {
  for (float w : {1.0f, 2.0f, 3.0f}) save_version(w);
  ModelSpec all = spec();
  all.policy.kind = VersionPolicy::Kind::kAll;
  all.labels = {{"stable", 1}, {"canary", 3}};
  ModelManager mm({all});
  mm.poll();
  EXPECT_EQ(predict(mm, 2), 6.0f);
  EXPECT_EQ(predict(mm, std::nullopt, "stable"), 3.0f);
  EXPECT_EQ(predict(mm, std::nullopt, "canary"), 9.0f);
  EXPECT_THAT(error_of([&] { mm.get("m", std::nullopt, "beta"); }),
              HasSubstr("has no version label 'beta'"));
  EXPECT_THAT(error_of([&] { mm.get("nope", std::nullopt); }),
              HasSubstr("model 'nope' is not served here"));

  ModelSpec specific = spec();
  specific.policy = {VersionPolicy::Kind::kSpecific, 1, {1, 3}};
  ModelManager ms({specific});
  ms.poll();
  EXPECT_EQ(predict(ms), 9.0f);
  EXPECT_EQ(predict(ms, 1), 3.0f);
  EXPECT_THAT(error_of([&] { ms.get("m", 2); }), HasSubstr("available versions: 1, 3"));
}

TEST_F(ModelManagerTest, ReadsTFServingsConfigFormat) {
  std::vector<ModelSpec> specs = parse_model_config(R"(
    model_config_list {
      config {
        name: "mnist"
        base_path: "/models/mnist"
        model_platform: "tensorflow"
        model_version_policy { specific { versions: 42 versions: 43 } }
        version_labels { key: "stable" value: 42 }
        version_labels { key: "canary" value: 43 }
      }
      config { name: "other" base_path: "/models/other" }
    })",
                                                    "test");
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "mnist");
  EXPECT_EQ(specs[0].policy.kind, VersionPolicy::Kind::kSpecific);
  EXPECT_EQ(specs[0].policy.versions, (std::vector<int64_t>{42, 43}));
  EXPECT_EQ(specs[0].labels.at("canary"), 43);
  EXPECT_EQ(specs[1].policy.kind, VersionPolicy::Kind::kLatest);
  EXPECT_THAT(error_of([] { parse_model_config("model_config_list { config { nme: 1 } }", "f"); }),
              HasSubstr("model config f: line 1, column"));
  EXPECT_THAT(
      error_of([] { parse_model_config("model_config_list { config { name: \"a\" } }", "f"); }),
      HasSubstr("needs a name and a base_path"));
}

}  // namespace
}  // namespace kiln::serving

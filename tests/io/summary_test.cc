// TensorBoard event files, decoded independently: records read back with RecordReader, Events
// parsed with the generated protobuf classes (and, when installed, with `protoc --decode`).
#include "kiln/io/summary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "src/api/io/proto/event.pb.h"
#include "src/api/io/proto/graph.pb.h"
#include "tests/testing/temp_dir.h"

namespace kiln {

// A two-output op, recorded only, so the GraphDef shows an input "name:1".
KILN_REGISTER_OP(summary_test_split)
    .input("x")
    .outputs(2)
    .kind(OpKind::kKernel)
    .non_differentiable()
    .shape_fn([](const InferContext& ctx) {
      return std::vector<TensorType>{ctx.input(0), ctx.input(0)};
    });

namespace io {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

class Summary : public testing_util::TempDirTest {
 protected:
  Summary() : TempDirTest(Dir::kAbsent) {}  // the event writers create it

  static std::vector<proto::Event> events_of(const std::string& path) {
    std::vector<proto::Event> events;
    for (const std::string& record : read_records(path)) {
      proto::Event e;
      EXPECT_TRUE(e.ParseFromString(record));
      events.push_back(e);
    }
    return events;
  }
};

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST_F(Summary, FileNameAndFirstEvent) {
  const std::string logdir = (dir_ / "run1" / "train").string();  // created with its parents
  const double before = now();
  EventWriter writer(logdir);
  const double after = now();
  ASSERT_TRUE(fs::is_directory(logdir));
  const fs::path path = writer.path();
  EXPECT_EQ(path.parent_path(), fs::path(logdir));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::regex pattern(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+))");
  std::smatch m;
  const std::string name = path.filename().string();
  ASSERT_TRUE(std::regex_match(name, m, pattern)) << name;
  EXPECT_NEAR(std::stod(m[1]), before, 2.0);
  EXPECT_EQ(m[2], host);
  EXPECT_EQ(m[3], std::to_string(getpid()));

  // The first event is on disk at once, before any flush.
  auto events = events_of(path.string());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GE(events[0].wall_time(), std::floor(before) - 1);
  EXPECT_LE(events[0].wall_time(), after + 1);
}

TEST_F(Summary, TwoWritersInOneDirectoryGetTwoFiles) {
  EventWriter a(dir_.string()), b(dir_.string());
  EXPECT_NE(a.path(), b.path());
  EXPECT_THAT(b.path(), HasSubstr("events.out.tfevents."));
}

TEST_F(Summary, ScalarsAreSimpleValues) {
  EventWriter writer(dir_.string());
  writer.add_scalar("loss", 0.25, 3);
  writer.add_scalar("accuracy", 0.875, 4);
  writer.flush();
  auto events = events_of(writer.path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].step(), 3);
  ASSERT_TRUE(events[1].has_summary());
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 0.25f);
  EXPECT_GT(events[1].wall_time(), 1e9);
  EXPECT_EQ(events[2].step(), 4);
  EXPECT_EQ(events[2].summary().value(0).tag(), "accuracy");
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 0.875f);
}

TEST_F(Summary, EventsAreBufferedUntilFlushOrTen) {
  EventWriter writer(dir_.string());
  writer.add_scalar("a", 1, 1);
  EXPECT_EQ(events_of(writer.path()).size(), 1u);  // only the file version so far
  writer.flush();
  EXPECT_EQ(events_of(writer.path()).size(), 2u);
  for (int i = 0; i < 10; ++i) writer.add_scalar("a", i, i);
  EXPECT_EQ(events_of(writer.path()).size(), 12u);  // the tenth pending event flushed them
  writer.add_scalar("a", 0, 99);
  const std::string path = writer.path();
  writer.close();
  EXPECT_EQ(events_of(path).size(), 13u);
}

TEST_F(Summary, DestructorFlushes) {
  std::string path;
  {
    EventWriter writer(dir_.string());
    writer.add_scalar("x", 2, 7);
    path = writer.path();
  }
  auto events = events_of(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step(), 7);
}

TEST_F(Summary, HistogramFieldsAndBuckets) {
  const std::vector<double> values = {-2.5, -1, 0, 0, 1e-12, 0.5, 1, 1, 3, 100};
  EventWriter writer(dir_.string());
  writer.add_histogram("weights", Tensor::from_vector(values, {2, 5}), 12);
  writer.flush();
  auto events = events_of(writer.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step(), 12);
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "weights");
  ASSERT_TRUE(events[1].summary().value(0).has_histo());
  const proto::HistogramProto& h = events[1].summary().value(0).histo();
  EXPECT_EQ(h.num(), 10);
  EXPECT_EQ(h.min(), -2.5);
  EXPECT_EQ(h.max(), 100);
  EXPECT_DOUBLE_EQ(h.sum(), -2.5 - 1 + 1e-12 + 0.5 + 1 + 1 + 3 + 100);
  EXPECT_DOUBLE_EQ(h.sum_squares(), 6.25 + 1 + 1e-24 + 0.25 + 1 + 1 + 9 + 10000);

  ASSERT_EQ(h.bucket_limit_size(), h.bucket_size());
  ASSERT_GT(h.bucket_size(), 0);
  EXPECT_EQ(h.bucket_limit(h.bucket_limit_size() - 1), DBL_MAX);
  double total = 0;
  for (int i = 0; i < h.bucket_size(); ++i) {
    if (i > 0) EXPECT_LT(h.bucket_limit(i - 1), h.bucket_limit(i));
    // Bucket i holds the values in (limit[i-1], limit[i]] (bucket 0 from -infinity).
    int expected = 0;
    for (double v : values) {
      expected += (i == 0 || v > h.bucket_limit(i - 1)) && v <= h.bucket_limit(i);
    }
    EXPECT_EQ(h.bucket(i), expected) << "bucket " << i << " up to " << h.bucket_limit(i);
    total += h.bucket(i);
  }
  EXPECT_EQ(total, 10);
  // Values on a limit belong to the bucket that ends there: 0 twice, 1e-12 once.
  for (auto [limit, count] : {std::pair{0.0, 2.0}, std::pair{1e-12, 1.0}}) {
    bool found = false;
    for (int i = 0; i < h.bucket_size(); ++i) {
      if (h.bucket_limit(i) == limit) {
        EXPECT_EQ(h.bucket(i), count) << limit;
        found = true;
      }
    }
    EXPECT_TRUE(found) << "no bucket ends at " << limit;
  }
}

TEST_F(Summary, HistogramOfEmptyAndIntegerTensors) {
  EventWriter writer(dir_.string());
  writer.add_histogram("empty", Tensor::from_vector(std::vector<float>{}), 0);
  writer.add_histogram("ints", Tensor::from_list<int32_t>({5, 5, -5}), 1);
  writer.flush();
  auto events = events_of(writer.path());
  ASSERT_EQ(events.size(), 3u);
  const auto& empty = events[1].summary().value(0).histo();
  EXPECT_EQ(empty.num(), 0);
  EXPECT_EQ(empty.bucket_size(), 1);  // all empty buckets merged
  EXPECT_EQ(empty.bucket(0), 0);
  const auto& ints = events[2].summary().value(0).histo();
  EXPECT_EQ(ints.num(), 3);
  EXPECT_EQ(ints.sum(), 5);
  EXPECT_EQ(ints.min(), -5);
  EXPECT_EQ(ints.max(), 5);
}

TEST_F(Summary, HistogramRejectsNonFiniteValues) {
  EventWriter writer(dir_.string());
  try {
    writer.add_histogram("w", Tensor::from_list<float>({1, NAN, 2}), 0);
    FAIL() << "expected a kiln::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("'w'"));
    EXPECT_THAT(e.what(), HasSubstr("element 1"));
  }
}

TEST_F(Summary, GraphIsAGraphDef) {
  Graph g("model");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  std::vector<Tensor> parts = call_op("summary_test_split", {x});
  Tensor y;
  {
    auto scope = g.name_scope("head");
    y = parts[1] + parts[0];
  }
  EventWriter writer(dir_.string());
  writer.add_graph(g);
  writer.flush();
  auto events = events_of(writer.path());
  ASSERT_EQ(events.size(), 2u);
  ASSERT_FALSE(events[1].graph_def().empty());
  proto::GraphDef def;
  ASSERT_TRUE(def.ParseFromString(events[1].graph_def()));
  ASSERT_EQ(def.node_size(), g.num_nodes());
  for (int id = 0; id < g.num_nodes(); ++id) {
    const NodeInfo info = g.node(id);
    const proto::NodeDef& node = def.node(id);
    EXPECT_EQ(node.name(), info.name);
    EXPECT_EQ(node.op(), info.op);
    ASSERT_EQ(node.input_size(), static_cast<int>(info.inputs.size()));
    ASSERT_TRUE(node.attr().count("_output_shapes"));
    ASSERT_EQ(node.attr().at("_output_shapes").list().shape_size(),
              static_cast<int>(info.outputs.size()));
  }
  // The sum reads output 1 then output 0 of the split: "split:1", "split".
  const NodeInfo split = g.node(parts[0].name().substr(0, parts[0].name().find(':')));
  const proto::NodeDef& sum = def.node(g.node(y.name().substr(0, y.name().find(':'))).id);
  EXPECT_THAT(sum.name(), testing::StartsWith("head/"));
  ASSERT_EQ(sum.input_size(), 2);
  EXPECT_EQ(sum.input(0), split.name + ":1");
  EXPECT_EQ(sum.input(1), split.name);
  const proto::NodeDef& placeholder = def.node(g.node("x").id);
  const auto& shape = placeholder.attr().at("_output_shapes").list().shape(0);
  ASSERT_EQ(shape.dim_size(), 2);
  EXPECT_EQ(shape.dim(0).size(), -1);
  EXPECT_EQ(shape.dim(1).size(), 3);
}

// protoc decodes the raw record payloads with our .proto file: wire compatibility checked by a
// second, independent protobuf implementation of the schema.
TEST_F(Summary, ProtocDecodesTheEvents) {
  if (std::system("command -v protoc > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "protoc is not installed: skipping the protoc --decode check";
  }
  EventWriter writer(dir_.string());
  writer.add_scalar("loss", 0.5, 42);
  writer.close();
  const auto records = read_records(writer.path());
  ASSERT_EQ(records.size(), 2u);
  const std::string source = KILN_SOURCE_DIR;
  for (int i = 0; i < 2; ++i) {
    const fs::path payload = dir_ / ("payload" + std::to_string(i));
    const fs::path decoded = dir_ / ("decoded" + std::to_string(i));
    std::ofstream(payload, std::ios::binary) << records[i];
    const std::string command = "protoc --decode=kiln.proto.Event --proto_path='" + source + "' '" +
                                source + "/src/api/io/proto/event.proto' < '" + payload.string() +
                                "' > '" + decoded.string() + "' 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(decoded);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    EXPECT_THAT(text, HasSubstr("wall_time: "));
    if (i == 0) {
      EXPECT_THAT(text, HasSubstr("file_version: \"brain.Event:2\""));
    } else {
      EXPECT_THAT(text, HasSubstr("step: 42"));
      EXPECT_THAT(text, HasSubstr("tag: \"loss\""));
      EXPECT_THAT(text, HasSubstr("simple_value: 0.5"));
    }
  }
}

}  // namespace
}  // namespace io
}  // namespace kiln

// EventWriter: Event protos (file version, scalars, histograms, GraphDef) framed as TFRecords
// and appended to a TensorBoard event file.
#include "kiln/io/summary.h"

#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <optional>
#include <type_traits>
#include <variant>

#include "kiln/graph.h"
#include "src/api/io/file_io.h"
#include "src/api/io/proto/event.pb.h"
#include "src/api/io/proto/graph.pb.h"

namespace kiln::io {
namespace {

constexpr int kFlushEvery = 10;
constexpr double kFlushSeconds = 120;
constexpr int kMaxNameTries = 1000;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == 0) return "localhost";
  return name;
}

// TensorFlow's default histogram bucket limits: -DBL_MAX, -1e20 .. -1e-12 growing by 10%, 0,
// 1e-12 .. 1e20, DBL_MAX.
const std::vector<double>& bucket_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> positive;
    for (double v = 1e-12; v < 1e20; v *= 1.1) positive.push_back(v);
    positive.push_back(DBL_MAX);
    std::vector<double> all;
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return limits;
}

proto::DataType data_type(DType dtype) {
  switch (dtype) {
    case f32:
      return proto::DT_FLOAT;
    case f64:
      return proto::DT_DOUBLE;
    case f16:
      return proto::DT_HALF;
    case bf16:
      return proto::DT_BFLOAT16;
    case i8:
      return proto::DT_INT8;
    case u8:
      return proto::DT_UINT8;
    case i32:
      return proto::DT_INT32;
    case i64:
      return proto::DT_INT64;
    case bool_:
      return proto::DT_BOOL;
  }
  return proto::DT_INVALID;
}

void set_shape(const Shape& shape, proto::TensorShapeProto* out) {
  for (int64_t d : shape) out->add_dim()->set_size(d);  // -1 (unknown) as TensorFlow writes it
}

proto::AttrValue attr_value(const AttrValue& value) {
  proto::AttrValue out;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out.set_i(v);
        } else if constexpr (std::is_same_v<T, double>) {
          out.set_f(static_cast<float>(v));
        } else if constexpr (std::is_same_v<T, bool>) {
          out.set_b(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out.set_s(v);
        } else if constexpr (std::is_same_v<T, DType>) {
          out.set_type(data_type(v));
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          out.mutable_list()->mutable_i()->Add(v.begin(), v.end());
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          for (double d : v) out.mutable_list()->add_f(static_cast<float>(d));
        } else if constexpr (std::is_same_v<T, std::shared_ptr<const SubGraph>>) {
          out.set_s("subgraph " + (v ? v->graph.name() : std::string("(null)")));
        } else {  // a Tensor: its values when small, else its type
          if (!v.defined()) {
            out.set_s("undefined");
          } else if (!v.is_symbolic() && v.size() <= 16) {
            out.set_s(v.str());
          } else {
            out.set_s(std::string(dtype_name(v.dtype())) + shape_str(v.shape()));
          }
        }
      },
      value);
  return out;
}

std::string graph_def_bytes(const Graph& graph) {
  proto::GraphDef def;
  def.mutable_versions()->set_producer(1);
  const int n = graph.num_nodes();
  for (int id = 0; id < n; ++id) {
    const NodeInfo node = graph.node(id);
    proto::NodeDef* out = def.add_node();
    out->set_name(node.name);
    out->set_op(node.op);
    for (const ValueRef& in : node.inputs) {
      const std::string name = graph.node(in.node).name;
      out->add_input(in.output == 0 ? name : name + ":" + std::to_string(in.output));
    }
    auto& attrs = *out->mutable_attr();
    for (const auto& [key, value] : node.attrs.values()) attrs[key] = attr_value(value);
    proto::AttrValue shapes;
    for (const TensorType& t : node.outputs) set_shape(t.shape, shapes.mutable_list()->add_shape());
    attrs["_output_shapes"] = std::move(shapes);
  }
  return def.SerializeAsString();
}

}  // namespace

struct EventWriter::State {
  std::mutex mu;
  std::optional<internal::OutputFile> file;
  int pending = 0;
  double last_flush = now_seconds();

  void write(proto::Event& event) {
    if (!file || file->closed()) {
      throw Error(ErrorCode::kFailedPrecondition, "EventWriter: write after close");
    }
    if (event.wall_time() == 0) event.set_wall_time(now_seconds());
    internal::write_record(*file, event.SerializeAsString());
    if (++pending >= kFlushEvery || now_seconds() - last_flush > kFlushSeconds) flush();
  }
  void flush() {
    if (!file || file->closed()) return;
    file->flush();
    pending = 0;
    last_flush = now_seconds();
  }
};

EventWriter::EventWriter(const std::string& logdir) : state_(std::make_unique<State>()) {
  internal::make_directories(logdir, "EventWriter");
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(std::time(nullptr)));
  std::string base = logdir;
  if (!base.empty() && base.back() != '/') base += '/';
  base += std::string("events.out.tfevents.") + stamp + "." + host_name() + "." +
          std::to_string(getpid());
  for (int n = 0; !state_->file; ++n) {
    const std::string path = n == 0 ? base : base + "." + std::to_string(n);
    try {
      state_->file.emplace(path, internal::OutputFile::Mode::kDirect, Compression::kNone,
                           "EventWriter");
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kAlreadyExists || n + 1 >= kMaxNameTries) throw;
    }
  }
  proto::Event first;
  first.set_file_version("brain.Event:2");
  state_->write(first);
  state_->flush();  // TensorBoard recognises the file from its first event
}

EventWriter::~EventWriter() {
  if (!state_) return;
  try {
    close();
  } catch (const Error&) {
    // A destructor cannot report it; close() explicitly to see errors.
  }
}

EventWriter::EventWriter(EventWriter&&) noexcept = default;
EventWriter& EventWriter::operator=(EventWriter&&) noexcept = default;

void EventWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  proto::Event event;
  event.set_step(step);
  proto::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  std::lock_guard lock(state_->mu);
  state_->write(event);
}

void EventWriter::add_histogram(const std::string& tag, const Tensor& values, int64_t step) {
  if (!values.defined() || values.is_symbolic()) {
    throw Error(ErrorCode::kInvalidArgument,
                "EventWriter::add_histogram '" + tag +
                    "': the tensor must be concrete (a symbolic tensor has no values yet)");
  }
  const std::vector<double> data = values.to_vector<double>();
  const std::vector<double>& limits = bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  double lo = 0, hi = 0, sum = 0, sum_squares = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const double v = data[i];
    if (!std::isfinite(v)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "EventWriter::add_histogram '" + tag + "': element " + std::to_string(i) +
                      " of the " + dtype_name(values.dtype()) + shape_str(values.shape()) +
                      " tensor is " + std::to_string(v) + "; a histogram needs finite values");
    }
    lo = i == 0 ? v : std::min(lo, v);
    hi = i == 0 ? v : std::max(hi, v);
    sum += v;
    sum_squares += v * v;
    // The first limit >= v: bucket i holds (limits[i-1], limits[i]].
    counts[std::lower_bound(limits.begin(), limits.end(), v) - limits.begin()] += 1;
  }
  proto::Event event;
  event.set_step(step);
  proto::Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag(tag);
  proto::HistogramProto* histo = value->mutable_histo();
  histo->set_min(lo);
  histo->set_max(hi);
  histo->set_num(static_cast<double>(data.size()));
  histo->set_sum(sum);
  histo->set_sum_squares(sum_squares);
  for (size_t i = 0; i < limits.size();) {
    double limit = limits[i];
    const double count = counts[i++];
    if (count == 0) {  // a run of empty buckets becomes one, ending at the run's last limit
      while (i < limits.size() && counts[i] == 0) limit = limits[i++];
    }
    histo->add_bucket_limit(limit);
    histo->add_bucket(count);
  }
  std::lock_guard lock(state_->mu);
  state_->write(event);
}

void EventWriter::add_graph(const Graph& graph) {
  proto::Event event;
  event.set_graph_def(graph_def_bytes(graph));
  std::lock_guard lock(state_->mu);
  state_->write(event);
}

void EventWriter::flush() {
  std::lock_guard lock(state_->mu);
  state_->flush();
}

void EventWriter::close() {
  std::lock_guard lock(state_->mu);
  if (state_->file) state_->file->close();
}

const std::string& EventWriter::path() const { return state_->file->path(); }

}  // namespace kiln::io

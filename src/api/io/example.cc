// tf.Example: Example <-> the generated protobuf messages, and parse_example, which reads each
// record's features in place (example_wire.h; protobuf for records it gives up on), checks
// them against the spec and copies their values straight into the batch tensors.
#include "kiln/io/example.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <forward_list>
#include <limits>
#include <optional>
#include <string_view>

#include "runtime/thread_pool.h"
#include "src/api/io/example_wire.h"
#include "src/api/io/proto/example.pb.h"

namespace kiln::io {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& what) {
  throw Error(code, "parse_example: " + what);
}

using wire::copy_values;
using wire::FeatureView;
using wire::Kind;
using wire::read_example;
using wire::read_feature;
using wire::Stop;

// The feature's value alone: no unknown fields, which protobuf keeps and would write back.
proto::Feature canonical_feature(const proto::Feature& feature) {
  proto::Feature out;
  switch (feature.kind_case()) {
    case proto::Feature::kBytesList:
      *out.mutable_bytes_list()->mutable_value() = feature.bytes_list().value();
      break;
    case proto::Feature::kFloatList:
      *out.mutable_float_list()->mutable_value() = feature.float_list().value();
      break;
    case proto::Feature::kInt64List:
      *out.mutable_int64_list()->mutable_value() = feature.int64_list().value();
      break;
    default:
      break;
  }
  return out;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kBytes:
      return "bytes_list";
    case Kind::kFloat:
      return "float_list";
    case Kind::kInt64:
      return "int64_list";
    default:
      return "no value";
  }
}

// The list a spec dtype reads, or kNone for a dtype no list holds.
Kind kind_for(DType dtype) {
  switch (dtype) {
    case f32:
      return Kind::kFloat;
    case i64:
      return Kind::kInt64;
    case u8:
      return Kind::kBytes;
    default:
      return Kind::kNone;
  }
}

const char* value_noun(DType dtype) {
  return dtype == f32 ? "float values" : dtype == i64 ? "int64 values" : "bytes";
}

// One spec entry, checked, with its output being filled in.
struct Column {
  std::string_view name;  // in the spec, which outlives the call
  DType dtype = f32;
  Kind kind = Kind::kNone;
  bool fixed = true;
  const Shape* shape = nullptr;  // fixed: one example's shape (in the spec)
  int64_t per_example = 0;       // fixed: elements per example
  std::vector<uint8_t> fill;     // fixed: the default's bytes
  bool has_default = false;
  size_t batch = 0;
  Tensor out;  // fixed: allocated once an example is found valid: the data bounds the memory
  std::vector<FeatureView> ragged;  // var-len: each example's values
  int64_t max_len = 0;              // var-len: the most values of an example

  uint8_t* row(size_t example) {
    if (!out.defined()) allocate();
    return static_cast<uint8_t*>(out.raw_mutable_data()) +
           example * static_cast<size_t>(per_example) * dtype_size(dtype);
  }
  void allocate() {
    Shape out_shape;
    out_shape.reserve(shape->size() + 1);
    out_shape.push_back(static_cast<int64_t>(batch));
    out_shape.insert(out_shape.end(), shape->begin(), shape->end());
    out = Tensor::empty(dtype, std::move(out_shape));
  }
};

std::string feature_where(std::string_view name, size_t example) {
  return "feature '" + std::string(name) + "' in example " + std::to_string(example);
}

Column make_column(const FeatureSpec& entry, size_t batch) {
  Column c;
  c.batch = batch;
  if (const auto* f = std::get_if<FixedLen>(&entry)) {
    c.name = f->name;
    c.dtype = f->dtype;
    c.fixed = true;
    c.shape = &f->shape;
  } else {
    const auto& v = std::get<VarLen>(entry);
    c.name = v.name;
    c.dtype = v.dtype;
    c.fixed = false;
  }
  // For messages only: this runs for each column of each call, so for every record when
  // records are parsed one at a time.
  auto who = [&] {
    return std::string(c.fixed ? "FixedLen" : "VarLen") + " feature '" + std::string(c.name) + "'";
  };
  if (c.name.empty()) {
    fail(ErrorCode::kInvalidArgument,
         std::string("a ") + (c.fixed ? "FixedLen" : "VarLen") + " spec has an empty name");
  }
  c.kind = kind_for(c.dtype);
  if (c.kind == Kind::kNone) {
    fail(ErrorCode::kInvalidArgument,
         who() + ": dtype " + dtype_name(c.dtype) +
             " is not readable from a tf.Example (f32 reads a float_list, i64 an int64_list, "
             "u8 a bytes_list)");
  }
  if (!c.fixed) {
    c.ragged.resize(batch);
    return c;
  }
  const Shape& shape = *c.shape;
  uint64_t per_example = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0) {
      fail(ErrorCode::kInvalidArgument,
           who() + ": shape " + shape_str(shape) + " must be fully defined and non-negative");
    }
    overflow =
        overflow || __builtin_mul_overflow(per_example, static_cast<uint64_t>(d), &per_example);
  }
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  if (!empty &&
      (overflow || per_example > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    fail(ErrorCode::kInvalidArgument,
         who() + ": shape " + shape_str(shape) + " has too many elements");
  }
  c.per_example = empty ? 0 : static_cast<int64_t>(per_example);
  uint64_t total = c.per_example == 0 ? 0 : batch;
  if (c.per_example != 0 &&
      (__builtin_mul_overflow(total, static_cast<uint64_t>(c.per_example), &total) ||
       __builtin_mul_overflow(total, dtype_size(c.dtype), &total) ||
       total > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    fail(ErrorCode::kInvalidArgument, who() + ": a batch of " + std::to_string(batch) +
                                          " of shape " + shape_str(shape) +
                                          " is too large for a tensor");
  }
  if (const auto& def = std::get<FixedLen>(entry).default_value) {
    if (!def->defined() || def->is_symbolic()) {
      fail(ErrorCode::kInvalidArgument, who() + ": default_value must be a concrete tensor");
    }
    if (def->rank() != 0 && def->shape() != shape) {
      fail(ErrorCode::kInvalidArgument, who() + ": default_value has shape " +
                                            shape_str(def->shape()) +
                                            ", but the feature's shape is " + shape_str(shape) +
                                            " (a scalar default fills the shape)");
    }
    const Tensor converted = def->dtype() == c.dtype ? *def : def->to(c.dtype);
    const size_t width = dtype_size(c.dtype);
    c.fill.resize(c.per_example * width);
    const auto* src = static_cast<const uint8_t*>(converted.raw_data());
    for (int64_t i = 0; i < c.per_example; ++i) {
      std::memcpy(c.fill.data() + i * width, src + (def->rank() == 0 ? 0 : i * width), width);
    }
    c.has_default = true;
  }
  return c;
}

// Fills example `example` of the column from `v` (kind kNone when the example lacks it).
void fill_column(Column& c, const FeatureView& v, size_t example) {
  if (v.kind == Kind::kNone) {
    if (!c.fixed) return;  // no values
    if (!c.has_default) {
      fail(ErrorCode::kInvalidArgument,
           "required " + feature_where(c.name, example) +
               " is missing (give its FixedLen spec a default_value to make it optional)");
    }
    if (c.fill.empty()) return;  // a zero-sized shape
    std::memcpy(c.row(example), c.fill.data(), c.fill.size());
    return;
  }
  if (v.kind != c.kind) {
    fail(ErrorCode::kInvalidArgument, feature_where(c.name, example) + " is a " +
                                          kind_name(v.kind) + ", but its spec (" +
                                          dtype_name(c.dtype) + ") reads " +
                                          (c.dtype == i64 ? "an " : "a ") + kind_name(c.kind));
  }
  if (!c.fixed) {
    c.ragged[example] = v;
    c.max_len = std::max(c.max_len, v.count);
    return;
  }
  if (v.count != c.per_example) {
    fail(ErrorCode::kInvalidArgument, feature_where(c.name, example) + " has " +
                                          std::to_string(v.count) + " " + value_noun(c.dtype) +
                                          ", but its FixedLen shape " + shape_str(*c.shape) +
                                          " needs " + std::to_string(c.per_example));
  }
  copy_values(v, c.row(example));
}

// Pads the var-len values into [batch, max_len] and their lengths into [batch].
void finish_ragged(const Column& c, std::map<std::string, Tensor>& result) {
  const size_t width = dtype_size(c.dtype);
  const int64_t batch = static_cast<int64_t>(c.ragged.size());
  Tensor lengths = Tensor::empty(i64, {batch});
  Tensor values = Tensor::empty(c.dtype, {batch, c.max_len});
  auto* length = batch ? static_cast<int64_t*>(lengths.raw_mutable_data()) : nullptr;
  auto* out = values.nbytes() ? static_cast<uint8_t*>(values.raw_mutable_data()) : nullptr;
  const size_t row_bytes = static_cast<size_t>(c.max_len) * width;
  for (int64_t i = 0; i < batch; ++i) {
    const FeatureView& v = c.ragged[i];
    length[i] = v.count;
    if (!out) continue;
    uint8_t* row = out + i * row_bytes;
    copy_values(v, row);
    const size_t used = static_cast<size_t>(v.count) * width;
    if (used < row_bytes) std::memset(row + used, 0, row_bytes - used);
  }
  result.emplace(std::string(c.name), std::move(values));
  result.emplace(lengths_key(std::string(c.name)), std::move(lengths));
}

// The names `a` and `b` produce the same output key (a VarLen 'x' also produces 'x/lengths').
bool keys_clash(const Column& a, const Column& b, std::string& key) {
  constexpr std::string_view kSuffix = "/lengths";
  auto lengths_of = [&](const Column& var, const Column& other) {
    return !var.fixed && other.name.size() == var.name.size() + kSuffix.size() &&
           other.name.starts_with(var.name) && other.name.ends_with(kSuffix);
  };
  if (a.name == b.name) {
    key = a.name;
  } else if (lengths_of(a, b)) {
    key = b.name;
  } else if (lengths_of(b, a)) {
    key = a.name;
  } else {
    return false;
  }
  return true;
}

proto::Feature to_proto(const FeatureValue& value) {
  proto::Feature f;
  if (const auto* b = std::get_if<BytesList>(&value)) {
    auto* list = f.mutable_bytes_list();
    for (const std::string& s : *b) list->add_value(s);
  } else if (const auto* fl = std::get_if<FloatList>(&value)) {
    f.mutable_float_list()->mutable_value()->Add(fl->begin(), fl->end());
  } else {
    const auto& il = std::get<Int64List>(value);
    f.mutable_int64_list()->mutable_value()->Add(il.begin(), il.end());
  }
  return f;
}

}  // namespace

Example& Example::set_bytes(const std::string& name, BytesList values) {
  features_[name] = std::move(values);
  return *this;
}
Example& Example::set_floats(const std::string& name, FloatList values) {
  features_[name] = std::move(values);
  return *this;
}
Example& Example::set_int64s(const std::string& name, Int64List values) {
  features_[name] = std::move(values);
  return *this;
}

Example& Example::set_tensor(const std::string& name, const Tensor& values) {
  if (!values.defined() || values.is_symbolic()) {
    throw Error(ErrorCode::kInvalidArgument,
                "Example::set_tensor: feature '" + name +
                    "': the tensor must be concrete (a symbolic tensor has no values yet)");
  }
  if (values.dtype() == u8) {
    const auto* p = static_cast<const char*>(values.raw_data());
    return set_bytes(name, {std::string(p, p + values.nbytes())});
  }
  if (is_floating(values.dtype())) return set_floats(name, values.to_vector<float>());
  return set_int64s(name, values.to_vector<int64_t>());
}

std::string Example::serialize() const {
  proto::Example example;
  proto::Features* features = example.mutable_features();
  for (const auto& [name, value] : features_) {  // in name order: deterministic bytes
    proto::FeatureEntry* entry = features->add_feature();
    entry->set_key(name);
    *entry->mutable_value() = to_proto(value);
  }
  return example.SerializeAsString();
}

Example Example::parse(std::string_view serialized) {
  proto::Example example;
  if (serialized.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !example.ParseFromArray(serialized.data(), static_cast<int>(serialized.size()))) {
    throw Error(ErrorCode::kDataLoss, "Example::parse: " + std::to_string(serialized.size()) +
                                          " bytes are not a valid serialized tf.Example");
  }
  Example out;
  for (const proto::FeatureEntry& entry : example.features().feature()) {
    const std::string& name = entry.key();
    const proto::Feature& feature = entry.value();
    out.features_.erase(name);  // a repeated key replaces the earlier one, as in a map
    switch (feature.kind_case()) {
      case proto::Feature::kBytesList:
        out.set_bytes(name,
                      {feature.bytes_list().value().begin(), feature.bytes_list().value().end()});
        break;
      case proto::Feature::kFloatList:
        out.set_floats(name,
                       {feature.float_list().value().begin(), feature.float_list().value().end()});
        break;
      case proto::Feature::kInt64List:
        out.set_int64s(name,
                       {feature.int64_list().value().begin(), feature.int64_list().value().end()});
        break;
      default:
        break;  // a feature without a value: TensorFlow treats it as absent
    }
  }
  return out;
}

std::string lengths_key(const std::string& name) { return name + "/lengths"; }

namespace {

// parse_example over `batch` records, record(i) giving the bytes of record i.
template <class Record>
std::map<std::string, Tensor> parse_records(size_t batch, Record&& record,
                                            const std::vector<FeatureSpec>& spec) {
  std::vector<Column> columns;
  columns.reserve(spec.size());
  for (const FeatureSpec& entry : spec) {
    columns.push_back(make_column(entry, batch));
    std::string key;
    for (size_t k = 0; k + 1 < columns.size(); ++k) {
      if (keys_clash(columns[k], columns.back(), key)) {
        fail(ErrorCode::kInvalidArgument,
             "the spec produces the output '" + key + "' twice (feature names must be unique, " +
                 "and a VarLen feature 'x' also produces 'x/lengths')");
      }
    }
  }
  // The column of a key, or -1: a linear search, as specs are small.
  auto column_of = [&](std::string_view key) -> int {
    for (size_t k = 0; k < columns.size(); ++k) {
      if (columns[k].name == key) return static_cast<int>(k);
    }
    return -1;
  };

  // Per call, not per record: no allocation for a spec of up to 8 features.
  std::array<FeatureView, 8> found_inline;
  std::vector<FeatureView> found_heap(columns.size() > found_inline.size() ? columns.size() : 0);
  const std::span<FeatureView> found =
      found_heap.empty() ? std::span<FeatureView>(found_inline.data(), columns.size())
                         : std::span<FeatureView>(found_heap);
  std::forward_list<std::string> reserialized;  // features of records protobuf parsed: stable
  std::optional<proto::Example> example;        // made for the first such record
  for (size_t i = 0; i < batch; ++i) {
    runtime::ThreadPool::yield_to_tasks();  // in the input pipeline: the step's kernels first
    const std::string_view bytes = record(i);
    std::fill(found.begin(), found.end(), FeatureView{});
    Stop stop;
    const bool read = read_example(
        bytes,
        [&](std::string_view key, const FeatureView& view) {
          if (int k = column_of(key); k >= 0) found[k] = view;  // the last one wins
        },
        stop);
    if (!read) {
      // Bytes the strict reader does not vouch for: protobuf decides.
      std::fill(found.begin(), found.end(), FeatureView{});
      if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
          !example.emplace().ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
        // Where it goes wrong, and in which feature: read again with lengths cut to the end.
        Stop clamped;
        int clamps = 0;
        if (!read_example(
                bytes, [](std::string_view, const FeatureView&) {}, clamped, &clamps)) {
          stop = clamped;
        }
        fail(ErrorCode::kDataLoss,
             "example " + std::to_string(i) + " (" + std::to_string(bytes.size()) +
                 " bytes) is not a valid serialized tf.Example (unreadable from byte " +
                 std::to_string(stop.offset) +
                 (stop.feature.empty() ? std::string()
                                       : ", in feature '" + std::string(stop.feature) + "'") +
                 ")");
      }
      for (const proto::FeatureEntry& entry : example->features().feature()) {
        const int k = column_of(entry.key());
        if (k < 0) continue;
        // Re-serialized without unknown fields, a feature is in the form the strict reader
        // reads.
        const std::string& canonical =
            reserialized.emplace_front(canonical_feature(entry.value()).SerializeAsString());
        if (!read_feature(reinterpret_cast<const uint8_t*>(canonical.data()), canonical.size(),
                          found[k])) {
          fail(ErrorCode::kInternal,
               feature_where(columns[k].name, i) + " could not be read after protobuf parsed it");
        }
      }
    }
    for (size_t k = 0; k < columns.size(); ++k) fill_column(columns[k], found[k], i);
  }

  std::map<std::string, Tensor> result;
  for (Column& c : columns) {
    if (c.fixed) {
      if (!c.out.defined()) c.allocate();  // no bytes to fill
      result.emplace(std::string(c.name), std::move(c.out));
    } else {
      finish_ragged(c, result);
    }
  }
  return result;
}

}  // namespace

std::map<std::string, Tensor> parse_example(std::span<const std::string> serialized,
                                            const std::vector<FeatureSpec>& spec) {
  return parse_records(
      serialized.size(), [&](size_t i) { return std::string_view(serialized[i]); }, spec);
}

std::map<std::string, Tensor> parse_example(std::span<const std::string_view> serialized,
                                            const std::vector<FeatureSpec>& spec) {
  return parse_records(
      serialized.size(), [&](size_t i) { return serialized[i]; }, spec);
}

std::map<std::string, Tensor> parse_example(const Tensor& values, const Tensor& row_splits,
                                            const std::vector<FeatureSpec>& spec) {
  auto bad = [](const std::string& what) {
    fail(ErrorCode::kInvalidArgument, "serialized records as (values, row_splits): " + what);
  };
  if (!values.defined() || values.is_symbolic() || !row_splits.defined() ||
      row_splits.is_symbolic()) {
    bad("values and row_splits must be concrete tensors");
  }
  if (values.dtype() != u8 || values.rank() != 1) {
    bad("values must be u8 of rank 1, not " + std::string(dtype_name(values.dtype())) +
        shape_str(values.shape()));
  }
  if (row_splits.dtype() != i64 || row_splits.rank() != 1 || row_splits.dim(0) < 1) {
    bad("row_splits must be i64 [batch + 1], not " + std::string(dtype_name(row_splits.dtype())) +
        shape_str(row_splits.shape()));
  }
  const auto* splits = static_cast<const int64_t*>(row_splits.raw_data());
  const int64_t n = row_splits.dim(0) - 1;
  const int64_t total = values.dim(0);
  if (splits[0] != 0 || splits[n] != total) {
    bad("row_splits must start at 0 and end at the size of values (" + std::to_string(total) +
        "), not run from " + std::to_string(splits[0]) + " to " + std::to_string(splits[n]));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (splits[i + 1] < splits[i]) {
      bad("row_splits decrease at record " + std::to_string(i) + " (" + std::to_string(splits[i]) +
          " then " + std::to_string(splits[i + 1]) + ")");
    }
  }
  const char* base = total ? static_cast<const char*>(values.raw_data()) : nullptr;
  return parse_records(
      static_cast<size_t>(n),
      [&](size_t i) {
        return std::string_view(base + splits[i], static_cast<size_t>(splits[i + 1] - splits[i]));
      },
      spec);
}

}  // namespace kiln::io

// tf.Example: Example <-> the generated protobuf messages, and parse_example, which checks each
// example's features against the spec and copies their values into batch tensors.
#include "kiln/io/example.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <unordered_map>

#include "src/io/proto/example.pb.h"

namespace kiln::io {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& what) {
  throw Error(code, "parse_example: " + what);
}

const char* list_name(proto::Feature::KindCase kind) {
  switch (kind) {
    case proto::Feature::kBytesList:
      return "bytes_list";
    case proto::Feature::kFloatList:
      return "float_list";
    case proto::Feature::kInt64List:
      return "int64_list";
    default:
      return "no value";
  }
}

// The list a spec dtype reads, or KIND_NOT_SET for a dtype no list holds.
proto::Feature::KindCase list_for(DType dtype) {
  switch (dtype) {
    case f32:
      return proto::Feature::kFloatList;
    case i64:
      return proto::Feature::kInt64List;
    case u8:
      return proto::Feature::kBytesList;
    default:
      return proto::Feature::KIND_NOT_SET;
  }
}

const char* value_noun(DType dtype) {
  return dtype == f32 ? "float values" : dtype == i64 ? "int64 values" : "bytes";
}

// A feature's values, viewed without copying: bytes are the concatenation of its values.
struct Values {
  const float* floats = nullptr;
  const int64_t* ints = nullptr;
  const proto::BytesList* bytes = nullptr;
  int64_t count = 0;  // elements: floats, ints, or total bytes
};

Values values_of(const proto::Feature& feature) {
  Values v;
  switch (feature.kind_case()) {
    case proto::Feature::kFloatList:
      v.floats = feature.float_list().value().data();
      v.count = feature.float_list().value_size();
      break;
    case proto::Feature::kInt64List:
      v.ints = feature.int64_list().value().data();
      v.count = feature.int64_list().value_size();
      break;
    case proto::Feature::kBytesList:
      v.bytes = &feature.bytes_list();
      for (const std::string& s : feature.bytes_list().value()) {
        v.count += static_cast<int64_t>(s.size());
      }
      break;
    default:
      break;
  }
  return v;
}

// Copies the values into `dst` (count elements of the dtype the values have).
void copy_values(const Values& v, void* dst) {
  if (v.count == 0) return;
  if (v.floats) {
    std::memcpy(dst, v.floats, v.count * sizeof(float));
  } else if (v.ints) {
    std::memcpy(dst, v.ints, v.count * sizeof(int64_t));
  } else if (v.bytes) {
    auto* out = static_cast<char*>(dst);
    for (const std::string& s : v.bytes->value()) {
      std::memcpy(out, s.data(), s.size());
      out += s.size();
    }
  }
}

// One spec entry, checked, with its output being filled in.
struct Column {
  std::string name;
  DType dtype;
  bool fixed;
  Shape shape;                // fixed: one example's shape
  int64_t per_example = 0;    // fixed: elements per example
  std::vector<uint8_t> fill;  // fixed: the default's bytes (empty: required)
  bool has_default = false;
  Tensor out;                                // fixed: [batch, shape...]
  std::vector<std::vector<uint8_t>> ragged;  // var-len: each example's values
};

std::string feature_where(const std::string& name, size_t example) {
  return "feature '" + name + "' in example " + std::to_string(example);
}

Column make_column(const FeatureSpec& entry, size_t batch) {
  Column c;
  if (const auto* f = std::get_if<FixedLen>(&entry)) {
    c.name = f->name;
    c.dtype = f->dtype;
    c.fixed = true;
    c.shape = f->shape;
  } else {
    const auto& v = std::get<VarLen>(entry);
    c.name = v.name;
    c.dtype = v.dtype;
    c.fixed = false;
  }
  const std::string kind = c.fixed ? "FixedLen" : "VarLen";
  if (c.name.empty()) fail(ErrorCode::kInvalidArgument, "a " + kind + " spec has an empty name");
  if (list_for(c.dtype) == proto::Feature::KIND_NOT_SET) {
    fail(ErrorCode::kInvalidArgument,
         kind + " feature '" + c.name + "': dtype " + dtype_name(c.dtype) +
             " is not readable from a tf.Example (f32 reads a float_list, i64 an int64_list, "
             "u8 a bytes_list)");
  }
  if (!c.fixed) {
    c.ragged.resize(batch);
    return c;
  }
  for (int64_t d : c.shape) {
    if (d < 0) {
      fail(ErrorCode::kInvalidArgument, "FixedLen feature '" + c.name + "': shape " +
                                            shape_str(c.shape) +
                                            " must be fully defined and non-negative");
    }
  }
  c.per_example = num_elements(c.shape);
  Shape out_shape = {static_cast<int64_t>(batch)};
  out_shape.insert(out_shape.end(), c.shape.begin(), c.shape.end());
  uint64_t total = c.per_example == 0 ? 0 : batch;
  if (c.per_example != 0 &&
      (__builtin_mul_overflow(total, static_cast<uint64_t>(c.per_example), &total) ||
       __builtin_mul_overflow(total, dtype_size(c.dtype), &total) ||
       total > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    fail(ErrorCode::kInvalidArgument, "FixedLen feature '" + c.name + "': a batch of " +
                                          std::to_string(batch) + " of shape " +
                                          shape_str(c.shape) + " is too large for a tensor");
  }
  if (const auto& def = std::get<FixedLen>(entry).default_value) {
    if (!def->defined() || def->is_symbolic()) {
      fail(ErrorCode::kInvalidArgument,
           "FixedLen feature '" + c.name + "': default_value must be a concrete tensor");
    }
    if (def->rank() != 0 && def->shape() != c.shape) {
      fail(ErrorCode::kInvalidArgument,
           "FixedLen feature '" + c.name + "': default_value has shape " + shape_str(def->shape()) +
               ", but the feature's shape is " + shape_str(c.shape) +
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
  c.out = Tensor::empty(c.dtype, out_shape);
  return c;
}

// Fills example `example` of the column from `feature` (null when the example lacks it).
void fill_column(Column& c, const proto::Feature* feature, size_t example) {
  const bool present = feature && feature->kind_case() != proto::Feature::KIND_NOT_SET;
  const size_t width = dtype_size(c.dtype);
  if (!present) {
    if (!c.fixed) return;  // no values
    if (!c.has_default) {
      fail(ErrorCode::kInvalidArgument,
           "required " + feature_where(c.name, example) +
               " is missing (give its FixedLen spec a default_value to make it optional)");
    }
    if (c.fill.empty()) return;  // a zero-sized shape
    std::memcpy(static_cast<uint8_t*>(c.out.raw_mutable_data()) + example * c.fill.size(),
                c.fill.data(), c.fill.size());
    return;
  }
  if (feature->kind_case() != list_for(c.dtype)) {
    fail(ErrorCode::kInvalidArgument,
         feature_where(c.name, example) + " is a " + list_name(feature->kind_case()) +
             ", but its spec (" + dtype_name(c.dtype) + ") reads " +
             (c.dtype == i64 ? "an " : "a ") + list_name(list_for(c.dtype)));
  }
  const Values v = values_of(*feature);
  if (!c.fixed) {
    c.ragged[example].resize(v.count * width);
    copy_values(v, c.ragged[example].data());
    return;
  }
  if (v.count != c.per_example) {
    fail(ErrorCode::kInvalidArgument, feature_where(c.name, example) + " has " +
                                          std::to_string(v.count) + " " + value_noun(c.dtype) +
                                          ", but its FixedLen shape " + shape_str(c.shape) +
                                          " needs " + std::to_string(c.per_example));
  }
  copy_values(v, static_cast<uint8_t*>(c.out.raw_mutable_data()) + example * c.per_example * width);
}

// Pads the var-len values into [batch, max_len] and their lengths into [batch].
void finish_ragged(const Column& c, std::map<std::string, Tensor>& result) {
  const size_t width = dtype_size(c.dtype);
  const int64_t batch = static_cast<int64_t>(c.ragged.size());
  std::vector<int64_t> lengths(batch);
  int64_t max_len = 0;
  for (int64_t i = 0; i < batch; ++i) {
    lengths[i] = static_cast<int64_t>(c.ragged[i].size() / width);
    max_len = std::max(max_len, lengths[i]);
  }
  Tensor values = Tensor::empty(c.dtype, {batch, max_len});
  if (values.nbytes() > 0) {
    auto* out = static_cast<uint8_t*>(values.raw_mutable_data());
    std::memset(out, 0, values.nbytes());
    for (int64_t i = 0; i < batch; ++i) {
      if (c.ragged[i].empty()) continue;
      std::memcpy(out + i * max_len * width, c.ragged[i].data(), c.ragged[i].size());
    }
  }
  result[c.name] = std::move(values);
  result[lengths_key(c.name)] = Tensor::from_vector(lengths, {batch});
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

std::map<std::string, Tensor> parse_example(std::span<const std::string> serialized,
                                            const std::vector<FeatureSpec>& spec) {
  const size_t batch = serialized.size();
  std::vector<Column> columns;
  std::set<std::string> keys;
  for (const FeatureSpec& entry : spec) {
    columns.push_back(make_column(entry, batch));
    const Column& c = columns.back();
    for (const std::string& key : c.fixed ? std::vector<std::string>{c.name}
                                          : std::vector<std::string>{c.name, lengths_key(c.name)}) {
      if (!keys.insert(key).second) {
        fail(ErrorCode::kInvalidArgument,
             "the spec produces the output '" + key + "' twice (feature names must be unique, " +
                 "and a VarLen feature 'x' also produces 'x/lengths')");
      }
    }
  }

  std::unordered_map<std::string_view, size_t> column_of;
  for (size_t k = 0; k < columns.size(); ++k) column_of[columns[k].name] = k;
  std::vector<const proto::Feature*> found(columns.size());

  proto::Example example;
  for (size_t i = 0; i < batch; ++i) {
    const std::string& bytes = serialized[i];
    if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
        !example.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      fail(ErrorCode::kDataLoss, "example " + std::to_string(i) + " (" +
                                     std::to_string(bytes.size()) +
                                     " bytes) is not a valid serialized tf.Example");
    }
    std::fill(found.begin(), found.end(), nullptr);
    for (const proto::FeatureEntry& entry : example.features().feature()) {
      auto it = column_of.find(entry.key());
      if (it != column_of.end()) found[it->second] = &entry.value();  // the last one wins
    }
    for (size_t k = 0; k < columns.size(); ++k) fill_column(columns[k], found[k], i);
  }

  std::map<std::string, Tensor> result;
  for (Column& c : columns) {
    if (c.fixed) {
      result[c.name] = std::move(c.out);
    } else {
      finish_ragged(c, result);
    }
  }
  return result;
}

}  // namespace kiln::io

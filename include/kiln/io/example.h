// tf.Example: build and serialise Examples (named lists of bytes, floats or int64s), and parse
// a batch of serialized Examples into tensors, as tf.io.parse_example does.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"

namespace kiln::io {

// The value of one feature: a list of byte strings, of floats or of 64-bit integers.
using BytesList = std::vector<std::string>;
using FloatList = std::vector<float>;
using Int64List = std::vector<int64_t>;
using FeatureValue = std::variant<BytesList, FloatList, Int64List>;

// One tf.Example: features by name. Setting a name again replaces its value.
class Example {
 public:
  Example& set_bytes(const std::string& name, BytesList values);
  Example& set_floats(const std::string& name, FloatList values);
  Example& set_int64s(const std::string& name, Int64List values);
  // A tensor's elements as one feature: u8 as a single bytes value holding them (a raw image),
  // floating types as floats, other integer types and bool as int64s. Throws kInvalidArgument
  // for a symbolic tensor.
  Example& set_tensor(const std::string& name, const Tensor& values);

  bool has(const std::string& name) const { return features_.count(name) != 0; }
  const std::map<std::string, FeatureValue>& features() const { return features_; }

  // The protobuf wire bytes; deterministic (features in name order).
  std::string serialize() const;
  // Throws kDataLoss when `serialized` is not a valid tf.Example.
  static Example parse(std::string_view serialized);

 private:
  std::map<std::string, FeatureValue> features_;
};

// A feature with the same number of values in every example.
//  - dtype f32 reads a float_list, i64 an int64_list, u8 a bytes_list: the bytes of all its
//    values, concatenated (a raw 28x28 image stored as one 784-byte value, shape {784}).
//  - shape: the shape of one example's value ({} for a single value); the feature must hold
//    exactly num_elements(shape) values (bytes, for u8).
//  - default_value: used for an example that lacks the feature; a scalar (filled in) or a
//    tensor of `shape`, converted to dtype. Without it, the feature is required.
struct FixedLen {
  std::string name;
  DType dtype = f32;
  Shape shape;
  std::optional<Tensor> default_value;
};

// A feature with any number of values (none when an example lacks it). dtype as for FixedLen.
struct VarLen {
  std::string name;
  DType dtype = f32;
};

using FeatureSpec = std::variant<FixedLen, VarLen>;

// The key of a VarLen feature's lengths in parse_example's result: name + "/lengths".
std::string lengths_key(const std::string& name);

// Parses serialized tf.Examples (one batch) into tensors, by name:
//  - FixedLen "x": [batch, shape...] of its dtype.
//  - VarLen "x": [batch, max_len] of its dtype, example i's values first in row i, padded with
//    zeros; and lengths_key("x") ("x/lengths"): i64 [batch], the number of values of each.
// Throws kiln::Error naming the feature and the example index: kInvalidArgument for a required
// feature that is missing, a feature of the wrong type (a float_list where the spec says i64)
// or with the wrong number of values, and for a bad spec; kDataLoss for bytes that are not a
// tf.Example (naming the byte offset where reading fails and, when it is inside a feature
// entry, that feature's key).
// Records are read in place (no copy of a record, no protobuf message per record), and each
// output is allocated once per call: parse a batch of records in one call rather than one
// record per call (see Dataset::ragged_batch and Dataset::parse_example).
std::map<std::string, Tensor> parse_example(std::span<const std::string> serialized,
                                            const std::vector<FeatureSpec>& spec);
std::map<std::string, Tensor> parse_example(std::span<const std::string_view> serialized,
                                            const std::vector<FeatureSpec>& spec);
// The records held as a ragged tensor, as Dataset::ragged_batch makes them: record i is
// values[row_splits[i] : row_splits[i + 1]]; values u8 [total bytes], row_splits i64 [batch + 1]
// (starting at 0, non-decreasing, ending at the size of values; else kInvalidArgument).
std::map<std::string, Tensor> parse_example(const Tensor& values, const Tensor& row_splits,
                                            const std::vector<FeatureSpec>& spec);

}  // namespace kiln::io

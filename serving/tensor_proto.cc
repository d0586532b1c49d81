// TensorProto <-> Tensor (serving/tensor_proto.h).
#include "serving/tensor_proto.h"

#include <cstring>
#include <limits>
#include <vector>

#include "kiln/error.h"
#include "serving/predict_json.h"

namespace kiln::serving {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

std::string what(const std::string& name, const tensorflow::TensorProto& p, const Shape& shape) {
  return "input '" + name + "' (" + tensorflow::DataType_Name(p.dtype()) + shape_str(shape) + ")";
}

// The elements of a typed list, `n` of them, repeating the last value when the list is shorter
// (TensorFlow's rule), into `out` as T.
template <class T, class List>
void fill(const List& values, int64_t n, T* out, const std::string& who) {
  const int64_t given = values.size();
  if (given > n)
    invalid(who + " has " + std::to_string(given) + " values for " + std::to_string(n) +
            " elements");
  for (int64_t i = 0; i < given; ++i) out[i] = static_cast<T>(values.Get(static_cast<int>(i)));
  const T last = given ? out[given - 1] : T{};
  for (int64_t i = given; i < n; ++i) out[i] = last;
}

// Integers carried in int_val must fit their dtype.
template <class T>
void fill_narrow(const google::protobuf::RepeatedField<int32_t>& values, int64_t n, T* out,
                 const std::string& who) {
  for (int32_t v : values) {
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      invalid(who + ": value " + std::to_string(v) + " is out of its dtype's range");
  }
  fill(values, n, out, who);
}

DType kiln_dtype(tensorflow::DataType d, const std::string& who) {
  switch (d) {
    case tensorflow::DT_FLOAT:
      return f32;
    case tensorflow::DT_DOUBLE:
      return f64;
    case tensorflow::DT_HALF:
      return f16;
    case tensorflow::DT_BFLOAT16:
      return bf16;
    case tensorflow::DT_INT8:
      return i8;
    case tensorflow::DT_UINT8:
      return u8;
    case tensorflow::DT_INT32:
      return i32;
    case tensorflow::DT_INT64:
      return i64;
    case tensorflow::DT_BOOL:
      return bool_;
    default:
      invalid(who + ": dtype " + tensorflow::DataType_Name(d) + " is not supported (Kiln has " +
              "DT_FLOAT, DT_DOUBLE, DT_HALF, DT_BFLOAT16, DT_INT8, DT_UINT8, DT_INT32, DT_INT64, " +
              "DT_BOOL, and DT_STRING for u8 bytes)");
  }
}

Tensor strings_from_proto(const tensorflow::TensorProto& p, const Shape& shape,
                          const std::string& who) {
  const int64_t n = num_elements(shape);
  if (p.string_val_size() != n)
    invalid(who + " has " + std::to_string(p.string_val_size()) + " strings for " +
            std::to_string(n) + " elements");
  const size_t len = n ? p.string_val(0).size() : 0;
  std::string bytes;
  bytes.reserve(len * static_cast<size_t>(n));
  for (const std::string& s : p.string_val()) {
    if (s.size() != len)
      invalid(who + ": its strings must have one length (the u8 input's innermost dimension), " +
              "but they have " + std::to_string(len) + " and " + std::to_string(s.size()) +
              " bytes");
    bytes += s;
  }
  Shape out = shape;
  out.push_back(static_cast<int64_t>(len));
  return Tensor::from_bytes(u8, out, bytes.data(), bytes.size());
}

}  // namespace

tensorflow::DataType to_tf_dtype(DType dtype) {
  switch (dtype) {
    case f32:
      return tensorflow::DT_FLOAT;
    case f64:
      return tensorflow::DT_DOUBLE;
    case f16:
      return tensorflow::DT_HALF;
    case bf16:
      return tensorflow::DT_BFLOAT16;
    case i8:
      return tensorflow::DT_INT8;
    case u8:
      return tensorflow::DT_UINT8;
    case i32:
      return tensorflow::DT_INT32;
    case i64:
      return tensorflow::DT_INT64;
    case bool_:
      return tensorflow::DT_BOOL;
  }
  invalid(std::string("dtype ") + dtype_name(dtype) + " has no TensorFlow DataType");
}

std::string tf_dtype_name(DType dtype) { return tensorflow::DataType_Name(to_tf_dtype(dtype)); }

Tensor tensor_from_proto(const tensorflow::TensorProto& p, const std::string& name) {
  Shape shape;
  if (p.tensor_shape().unknown_rank()) invalid("input '" + name + "' has an unknown rank");
  for (const auto& d : p.tensor_shape().dim()) {
    if (d.size() < 0)
      invalid("input '" + name + "' has an unknown dimension (" + std::to_string(d.size()) + ")");
    shape.push_back(d.size());
  }
  const std::string who = what(name, p, shape);
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(elements, d, &elements))
      invalid(who + " has more elements than a tensor can hold");
  }
  if (p.dtype() == tensorflow::DT_STRING) return strings_from_proto(p, shape, who);
  const DType dtype = kiln_dtype(p.dtype(), who);
  const int64_t n = elements;
  const size_t nbytes = static_cast<size_t>(n) * dtype_size(dtype);
  if (!p.tensor_content().empty()) {
    if (p.tensor_content().size() != nbytes)
      invalid(who + " has " + std::to_string(p.tensor_content().size()) +
              " bytes of tensor_content; its shape and dtype need " + std::to_string(nbytes));
    return Tensor::from_bytes(dtype, shape, p.tensor_content().data(), nbytes);
  }
  Tensor t = Tensor::empty(dtype, shape);
  void* out = t.raw_mutable_data();
  switch (dtype) {
    case f32:
      fill(p.float_val(), n, static_cast<float*>(out), who);
      break;
    case f64:
      fill(p.double_val(), n, static_cast<double*>(out), who);
      break;
    case f16:
    case bf16:  // half_val holds each value's 16 bits
      fill_narrow(p.half_val(), n, static_cast<uint16_t*>(out), who);
      break;
    case i8:
      fill_narrow(p.int_val(), n, static_cast<int8_t*>(out), who);
      break;
    case u8:
      fill_narrow(p.int_val(), n, static_cast<uint8_t*>(out), who);
      break;
    case i32:
      fill(p.int_val(), n, static_cast<int32_t*>(out), who);
      break;
    case i64:
      fill(p.int64_val(), n, static_cast<int64_t*>(out), who);
      break;
    case bool_:
      fill(p.bool_val(), n, static_cast<uint8_t*>(out), who);
      break;
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, tensorflow::TensorProto* p) {
  const Shape& s = t.shape();
  const bool as_strings = is_bytes_output(name, t);
  const size_t dims = as_strings ? s.size() - 1 : s.size();
  for (size_t i = 0; i < dims; ++i) p->mutable_tensor_shape()->add_dim()->set_size(s[i]);
  const char* data = static_cast<const char*>(t.raw_data());
  if (as_strings) {
    p->set_dtype(tensorflow::DT_STRING);
    const size_t len = static_cast<size_t>(s.back());
    const int64_t rows = num_elements(Shape(s.begin(), s.end() - 1));
    for (int64_t r = 0; r < rows; ++r) p->add_string_val(data + r * len, len);
    return;
  }
  p->set_dtype(to_tf_dtype(t.dtype()));
  p->set_tensor_content(data, t.nbytes());
}

}  // namespace kiln::serving

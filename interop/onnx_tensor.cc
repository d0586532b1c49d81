// ONNX TensorProto <-> kiln::Tensor: every storage a writer may use (raw_data, the typed lists,
// external data), checked against the dims before anything is copied.
#include "interop/onnx_tensor.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "kiln/error.h"

namespace kiln::onnx::internal {
namespace {

using ::onnx::TensorProto;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// Elements of `values` converted to the tensor's element type T, copied into `out`.
template <class T, class List>
void copy_list(const List& values, T* out) {
  for (int i = 0; i < values.size(); ++i) out[i] = static_cast<T>(values.Get(i));
}

std::string read_external(const TensorProto& proto, const std::string& dir, size_t nbytes,
                          const std::string& where) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : proto.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      fail(ErrorCode::kDataLoss, where + ": external data " + kv.key() + " '" + kv.value() +
                                     "' is not a number");
    }
  }
  if (location.empty()) fail(ErrorCode::kDataLoss, where + ": external data without a location");
  const std::filesystem::path rel(location);
  if (rel.is_absolute() || location.find("..") != std::string::npos) {
    fail(ErrorCode::kDataLoss,
         where + ": external data location '" + location + "' leaves the model's directory");
  }
  const std::string path = (std::filesystem::path(dir) / rel).string();
  if (length >= 0 && static_cast<size_t>(length) != nbytes) {
    fail(ErrorCode::kDataLoss, where + ": external data length " + std::to_string(length) +
                                   " is not the " + std::to_string(nbytes) + " bytes of its dims");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kDataLoss, where + ": cannot open external data " + path);
  in.seekg(offset);
  std::string bytes(nbytes, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(nbytes));
  if (offset < 0 || static_cast<size_t>(in.gcount()) != nbytes) {
    fail(ErrorCode::kDataLoss, where + ": " + path + " holds fewer than " +
                                   std::to_string(nbytes) + " bytes at offset " +
                                   std::to_string(offset));
  }
  return bytes;
}

}  // namespace

std::optional<DType> dtype_from_onnx(int32_t elem_type) {
  switch (elem_type) {
    case TensorProto::FLOAT: return f32;
    case TensorProto::DOUBLE: return f64;
    case TensorProto::FLOAT16: return f16;
    case TensorProto::BFLOAT16: return bf16;
    case TensorProto::INT8: return i8;
    case TensorProto::UINT8: return u8;
    case TensorProto::INT32: return i32;
    case TensorProto::INT64: return i64;
    case TensorProto::BOOL: return bool_;
    default: return std::nullopt;
  }
}

int32_t onnx_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return TensorProto::FLOAT;
    case DType::f64: return TensorProto::DOUBLE;
    case DType::f16: return TensorProto::FLOAT16;
    case DType::bf16: return TensorProto::BFLOAT16;
    case DType::i8: return TensorProto::INT8;
    case DType::u8: return TensorProto::UINT8;
    case DType::i32: return TensorProto::INT32;
    case DType::i64: return TensorProto::INT64;
    case DType::bool_: return TensorProto::BOOL;
  }
  return TensorProto::UNDEFINED;
}

std::string onnx_dtype_name(int32_t elem_type) {
  if (TensorProto::DataType_IsValid(elem_type))
    return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(elem_type));
  return "data type " + std::to_string(elem_type);
}

Tensor tensor_from_proto(const TensorProto& proto, const std::string& external_dir,
                         const std::string& where) {
  const std::optional<DType> dtype = dtype_from_onnx(proto.data_type());
  if (!dtype) {
    fail(ErrorCode::kUnimplemented,
         where + ": Kiln has no dtype for ONNX's " + onnx_dtype_name(proto.data_type()));
  }
  Shape shape;
  int64_t count = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0) fail(ErrorCode::kDataLoss, where + ": negative dimension " + std::to_string(d));
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d)
      fail(ErrorCode::kDataLoss, where + ": the element count overflows");
    count *= d;
    shape.push_back(d);
  }
  const size_t size = dtype_size(*dtype);
  if (static_cast<uint64_t>(count) > (uint64_t{1} << 40) / size)
    fail(ErrorCode::kDataLoss, where + ": " + std::to_string(count) + " elements is too many");
  const size_t nbytes = static_cast<size_t>(count) * size;
  Tensor t = Tensor::empty(*dtype, shape);
  auto* out = static_cast<uint8_t*>(count == 0 ? nullptr : t.raw_mutable_data());
  auto check_count = [&](int64_t n, const char* field) {
    if (n != count) {
      fail(ErrorCode::kDataLoss, where + ": " + field + " holds " + std::to_string(n) +
                                     " values, the dims " + std::to_string(count));
    }
  };
  if (proto.data_location() == TensorProto::EXTERNAL) {
    const std::string bytes = read_external(proto, external_dir, nbytes, where);
    if (nbytes) std::memcpy(out, bytes.data(), nbytes);
    return t;
  }
  if (proto.has_raw_data()) {
    check_count(static_cast<int64_t>(proto.raw_data().size() / size), "raw_data");
    if (proto.raw_data().size() != nbytes) check_count(-1, "raw_data");
    if (nbytes) std::memcpy(out, proto.raw_data().data(), nbytes);  // little-endian, as ONNX
    return t;
  }
  switch (*dtype) {
    case DType::f32:
      check_count(proto.float_data_size(), "float_data");
      copy_list(proto.float_data(), reinterpret_cast<float*>(out));
      break;
    case DType::f64:
      check_count(proto.double_data_size(), "double_data");
      copy_list(proto.double_data(), reinterpret_cast<double*>(out));
      break;
    case DType::i64:
      check_count(proto.int64_data_size(), "int64_data");
      copy_list(proto.int64_data(), reinterpret_cast<int64_t*>(out));
      break;
    case DType::i32:
      check_count(proto.int32_data_size(), "int32_data");
      copy_list(proto.int32_data(), reinterpret_cast<int32_t*>(out));
      break;
    case DType::i8:
      check_count(proto.int32_data_size(), "int32_data");
      copy_list(proto.int32_data(), reinterpret_cast<int8_t*>(out));
      break;
    case DType::u8:
    case DType::bool_:
      check_count(proto.int32_data_size(), "int32_data");
      copy_list(proto.int32_data(), reinterpret_cast<uint8_t*>(out));
      break;
    case DType::f16:
    case DType::bf16:  // the 16 bits of each value, in int32_data
      check_count(proto.int32_data_size(), "int32_data");
      copy_list(proto.int32_data(), reinterpret_cast<uint16_t*>(out));
      break;
  }
  return t;
}

void tensor_to_proto(const Tensor& t, TensorProto* proto) {
  proto->Clear();
  proto->set_data_type(onnx_dtype(t.dtype()));
  for (int64_t d : t.shape()) proto->add_dims(d);
  if (t.size() > 0) proto->set_raw_data(t.raw_data(), t.nbytes());
}

}  // namespace kiln::onnx::internal

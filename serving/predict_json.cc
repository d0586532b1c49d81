// TF Serving's REST predict bodies <-> tensors (serving/predict_json.h). Parsed with RapidJSON
// (TF Serving's own choice; its NaN/Infinity flag accepts the tokens TF Serving does).
#include "serving/predict_json.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln::serving {
namespace {

using rapidjson::Value;

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

bool is_b64(const Value& v) { return v.IsObject() && v.MemberCount() == 1 && v.HasMember("b64"); }

// The values of one input, gathered from a nest of JSON arrays: its shape and its elements.
class Collector {
 public:
  Collector(std::string name, DType dtype, Shape outer)
      : name_(std::move(name)), dtype_(dtype), shape_(std::move(outer)) {}

  // `v` at nesting depth `depth` (the dimensions above it are known).
  void add(const Value& v, size_t depth) {
    if (v.IsArray()) {
      if (leaf_depth_ >= 0 && static_cast<int64_t>(depth) >= leaf_depth_)
        fail("is nested deeper in some places than in others");
      const int64_t n = static_cast<int64_t>(v.Size());
      if (depth == shape_.size()) {
        shape_.push_back(n);
      } else if (shape_[depth] != n) {
        fail("is ragged: dimension " + std::to_string(depth) + " has " +
             std::to_string(shape_[depth]) + " elements in one place and " + std::to_string(n) +
             " in another");
      }
      for (const Value& e : v.GetArray()) add(e, depth + 1);
      return;
    }
    if (leaf_depth_ < 0) leaf_depth_ = static_cast<int64_t>(depth);
    if (static_cast<int64_t>(depth) != leaf_depth_ || depth < shape_.size() - (bytes_dim_ ? 1 : 0))
      fail("is nested deeper in some places than in others");
    add_leaf(v);
  }

  Tensor tensor() const {
    Shape shape = shape_;
    const int64_t count = static_cast<int64_t>(
        dtype_ == u8 && bytes_dim_ ? bytes_.size()
                                   : (is_floating(dtype_) ? reals_.size() : ints_.size()));
    int64_t want = 1;
    for (int64_t d : shape) want *= d;
    if (want != count)
      fail("has " + std::to_string(count) + " values for shape " + shape_str(shape));
    if (bytes_dim_) return Tensor::from_bytes(u8, shape, bytes_.data(), bytes_.size());
    if (is_floating(dtype_)) {
      Tensor t = Tensor::from_bytes(f64, shape, reals_.data(), reals_.size() * sizeof(double));
      return dtype_ == f64 ? t : convert(t, dtype_);
    }
    Tensor t = Tensor::from_bytes(i64, shape, ints_.data(), ints_.size() * sizeof(int64_t));
    return dtype_ == i64 ? t : convert(t, dtype_);
  }

  const std::string& name() const { return name_; }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    invalid("input '" + name_ + "' " + what);
  }

  const char* json_kind(const Value& v) const {
    if (v.IsBool()) return "a boolean";
    if (v.IsNumber()) return "a number";
    if (v.IsString()) return "a string";
    if (v.IsNull()) return "null";
    return "an object";
  }

  void add_leaf(const Value& v) {
    const std::string element = " at element " + std::to_string(count());
    if (is_b64(v)) {
      if (dtype_ != u8) {
        fail("is " + std::string(dtype_name(dtype_)) +
             ", but a {\"b64\": ...} value is bytes (a u8 input's innermost dimension)" + element);
      }
      const Value& s = v["b64"];
      if (!s.IsString()) fail("has a \"b64\" value that is not a string" + element);
      const std::string bytes = base64_decode(std::string_view(s.GetString(), s.GetStringLength()));
      const int64_t n = static_cast<int64_t>(bytes.size());
      if (!bytes_dim_) {
        if (!bytes_.empty() || !ints_.empty()) fail("mixes b64 values and numbers");
        bytes_dim_ = true;
        shape_.push_back(n);
      } else if (shape_.back() != n) {
        fail("has b64 values of " + std::to_string(shape_.back()) + " and " + std::to_string(n) +
             " bytes");
      }
      bytes_.append(bytes);
      return;
    }
    if (bytes_dim_) fail("mixes b64 values and numbers");
    if (dtype_ == bool_) {
      if (!v.IsBool()) fail("is bool, but " + std::string(json_kind(v)) + " was given" + element);
      ints_.push_back(v.GetBool() ? 1 : 0);
      return;
    }
    if (!v.IsNumber())
      fail("is " + std::string(dtype_name(dtype_)) + ", but " + json_kind(v) + " was given" +
           element);
    if (is_floating(dtype_)) {
      reals_.push_back(v.GetDouble());
      return;
    }
    int64_t i;
    if (v.IsInt64()) {
      i = v.GetInt64();
    } else {
      const double d = v.GetDouble();
      if (!(std::trunc(d) == d) || std::fabs(d) > 9.2e18)
        fail("is " + std::string(dtype_name(dtype_)) + ", but " + std::to_string(d) +
             " is not an integer" + element);
      i = static_cast<int64_t>(d);
    }
    int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
    if (dtype_ == i8) lo = -128, hi = 127;
    if (dtype_ == u8) lo = 0, hi = 255;
    if (dtype_ == i32)
      lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
    if (i < lo || i > hi)
      fail("is " + std::string(dtype_name(dtype_)) + ", but " + std::to_string(i) +
           " is out of its range" + element);
    ints_.push_back(i);
  }

  size_t count() const { return reals_.size() + ints_.size(); }

  std::string name_;
  DType dtype_;
  Shape shape_;
  int64_t leaf_depth_ = -1;
  bool bytes_dim_ = false;
  std::vector<double> reals_;
  std::vector<int64_t> ints_;  // integers and bools
  std::string bytes_;
};

std::string type_str(const TensorType& t) {
  std::string s = dtype_name(t.dtype);
  return s + shape_str(t.shape);
}

// The input `name` from `values` (each at nesting `depth` below the known dimensions `outer`).
Tensor decode(const std::string& name, const TensorType& want,
              const std::vector<const Value*>& values, Shape outer, size_t depth) {
  Collector c(name, want.dtype, std::move(outer));
  for (const Value* v : values) c.add(*v, depth);
  Tensor t = c.tensor();
  check_input_shape(name, t, want);
  return t;
}

std::string names_of(const std::map<std::string, TensorType>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

// ---- output ---------------------------------------------------------------------------------

void append_number(std::string& out, double d, bool single) {
  if (std::isnan(d)) {
    out += "NaN";
  } else if (std::isinf(d)) {
    out += d > 0 ? "Infinity" : "-Infinity";
  } else {
    char buf[32];
    auto r = single ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(d))
                    : std::to_chars(buf, buf + sizeof buf, d);
    out.append(buf, r.ptr);
  }
}

// Element-wise JSON of a tensor's sub-block starting at flat `offset` with dims [dim, rank).
void append_block(std::string& out, const Tensor& t, size_t dim, int64_t offset, bool as_bytes) {
  const Shape& s = t.shape();
  if (as_bytes && dim + 1 == s.size()) {
    const auto* p = static_cast<const char*>(t.raw_data()) + offset;
    out += "{\"b64\": \"" + base64_encode(std::string_view(p, static_cast<size_t>(s[dim]))) + "\"}";
    return;
  }
  if (dim == s.size()) {
    switch (t.dtype()) {
      case f64:
        append_number(out, t.data<double>()[offset], false);
        break;
      case f32:
        append_number(out, t.data<float>()[offset], true);
        break;
      case i64:
        out += std::to_string(t.data<int64_t>()[offset]);
        break;
      case i32:
        out += std::to_string(t.data<int32_t>()[offset]);
        break;
      case i8:
        out += std::to_string(t.data<int8_t>()[offset]);
        break;
      case u8:
        out += std::to_string(t.data<uint8_t>()[offset]);
        break;
      case bool_:
        out += static_cast<const uint8_t*>(t.raw_data())[offset] ? "true" : "false";
        break;
      default:
        throw Error(ErrorCode::kInternal, "predict_json: unexpected dtype");
    }
    return;
  }
  int64_t stride = 1;
  for (size_t d = dim + 1; d < s.size(); ++d) stride *= s[d];
  out += '[';
  for (int64_t i = 0; i < s[dim]; ++i) {
    if (i) out += ", ";
    append_block(out, t, dim + 1, offset + i * stride, as_bytes);
  }
  out += ']';
}


// f16 and bf16 are written as f32.
Tensor printable(const Tensor& t) {
  return t.dtype() == f16 || t.dtype() == bf16 ? convert(t, f32) : t;
}

}  // namespace

const io::SignatureInfo& find_signature(const std::map<std::string, io::SignatureInfo>& signatures,
                                        const std::string& name) {
  auto sig = signatures.find(name);
  if (sig == signatures.end()) {
    std::string known;
    for (const auto& [k, v] : signatures) known += (known.empty() ? "'" : ", '") + k + "'";
    throw Error(ErrorCode::kNotFound,
                "signature '" + name + "' is not one of the model's (" + known + ")");
  }
  return sig->second;
}

void check_input_names(const std::vector<std::string>& given,
                       const std::map<std::string, TensorType>& want, const std::string& where) {
  for (const std::string& g : given) {
    if (!want.count(g))
      invalid(where + "input '" + g + "' is not one of the signature's inputs (" + names_of(want) +
              ")");
  }
  for (const auto& [k, v] : want) {
    if (std::find(given.begin(), given.end(), k) == given.end())
      invalid(where + "input '" + k + "' (" + type_str(v) + ") is missing");
  }
}

void check_input_shape(const std::string& name, const Tensor& t, const TensorType& want) {
  bool ok = t.shape().size() == want.shape.size();
  for (size_t i = 0; ok && i < want.shape.size(); ++i)
    ok = want.shape[i] == kUnknownDim || want.shape[i] == t.shape()[i];
  if (!ok) {
    invalid("input '" + name + "' has shape " + shape_str(t.shape()) +
            ", but the signature wants " + type_str(want));
  }
}

bool is_bytes_output(const std::string& name, const Tensor& t) {
  return t.dtype() == u8 && !t.shape().empty() && name.size() >= 6 &&
         name.compare(name.size() - 6, 6, "_bytes") == 0;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string error_json(std::string_view message) {
  return "{\"error\": " + json_string(message) + "}";
}

PredictRequest parse_predict_request(std::string_view body,
                                     const std::map<std::string, io::SignatureInfo>& signatures) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseNanAndInfFlag | rapidjson::kParseFullPrecisionFlag>(body.data(),
                                                                                 body.size());
  if (doc.HasParseError()) {
    invalid(std::string("the request is not valid JSON: ") +
            rapidjson::GetParseError_En(doc.GetParseError()) + " at offset " +
            std::to_string(doc.GetErrorOffset()));
  }
  if (!doc.IsObject()) invalid("the request must be a JSON object");
  PredictRequest req;
  req.signature_name = "serving_default";
  if (doc.HasMember("signature_name")) {
    if (!doc["signature_name"].IsString()) invalid("\"signature_name\" must be a string");
    req.signature_name = doc["signature_name"].GetString();
  }
  const std::map<std::string, TensorType>& want =
      find_signature(signatures, req.signature_name).inputs;
  const bool rows = doc.HasMember("instances"), columns = doc.HasMember("inputs");
  if (rows == columns) invalid("the request must have exactly one of \"instances\" and \"inputs\"");
  for (auto m = doc.MemberBegin(); m != doc.MemberEnd(); ++m) {
    const std::string key = m->name.GetString();
    if (key != "instances" && key != "inputs" && key != "signature_name")
      invalid("unknown member \"" + key + "\" in the request");
  }
  if (rows) {
    req.format = RequestFormat::kRow;
    const Value& inst = doc["instances"];
    if (!inst.IsArray()) invalid("\"instances\" must be a list (one element per example)");
    const Shape batch = {static_cast<int64_t>(inst.Size())};
    const bool named = inst.Size() > 0 && inst[0].IsObject() && !is_b64(inst[0]);
    if (!named) {
      if (want.size() != 1) {
        invalid("the signature has " + std::to_string(want.size()) + " inputs (" + names_of(want) +
                "): each instance must be an object naming them");
      }
      const auto& [name, type] = *want.begin();
      for (const Value& r : inst.GetArray())
        if (r.IsObject() && !is_b64(r)) invalid("instances mix objects and values");
      req.inputs[name] = decode(name, type, {&inst}, {}, 0);
      return req;
    }
    for (rapidjson::SizeType i = 0; i < inst.Size(); ++i) {
      const Value& r = inst[i];
      if (!r.IsObject() || is_b64(r)) invalid("instances mix objects and values");
      std::vector<std::string> given;
      for (auto m = r.MemberBegin(); m != r.MemberEnd(); ++m) given.push_back(m->name.GetString());
      check_input_names(given, want, "instance " + std::to_string(i) + ": ");
    }
    for (const auto& [name, type] : want) {
      std::vector<const Value*> col;
      for (const Value& r : inst.GetArray()) col.push_back(&r[name.c_str()]);
      req.inputs[name] = decode(name, type, col, batch, 1);
    }
    return req;
  }
  req.format = RequestFormat::kColumnar;
  const Value& in = doc["inputs"];
  if (in.IsObject() && !is_b64(in)) {
    std::vector<std::string> given;
    for (auto m = in.MemberBegin(); m != in.MemberEnd(); ++m) given.push_back(m->name.GetString());
    check_input_names(given, want, "");
    for (const auto& [name, type] : want)
      req.inputs[name] = decode(name, type, {&in[name.c_str()]}, {}, 0);
    return req;
  }
  if (want.size() != 1) {
    invalid("the signature has " + std::to_string(want.size()) + " inputs (" + names_of(want) +
            "): \"inputs\" must be an object naming them");
  }
  const auto& [name, type] = *want.begin();
  req.inputs[name] = decode(name, type, {&in}, {}, 0);
  return req;
}

std::string format_predict_response(const std::map<std::string, Tensor>& raw_outputs,
                                    RequestFormat format) {
  std::map<std::string, Tensor> outputs;
  for (const auto& [k, v] : raw_outputs) outputs[k] = printable(v);
  std::string out;
  if (format == RequestFormat::kColumnar) {
    out = "{\"outputs\": ";
    if (outputs.size() == 1) {
      const auto& [name, t] = *outputs.begin();
      append_block(out, t, 0, 0, is_bytes_output(name, t));
    } else {
      out += '{';
      bool first = true;
      for (const auto& [name, t] : outputs) {
        out += (first ? "" : ", ") + json_string(name) + ": ";
        append_block(out, t, 0, 0, is_bytes_output(name, t));
        first = false;
      }
      out += '}';
    }
    return out + "}";
  }
  int64_t batch = -1;
  for (const auto& [name, t] : outputs) {
    const int64_t n = t.shape().empty() ? -1 : t.shape()[0];
    if (n < 0 || (batch >= 0 && n != batch)) {
      invalid("output '" + name + "' has shape " + shape_str(t.shape()) +
              ": a row (\"instances\") response needs every output batched alike; use "
              "\"inputs\" for a columnar response");
    }
    batch = n;
  }
  out = "{\"predictions\": [";
  for (int64_t i = 0; i < batch; ++i) {
    if (i) out += ", ";
    if (outputs.size() != 1) out += '{';
    bool first = true;
    for (const auto& [name, t] : outputs) {
      int64_t row = 1;
      for (size_t d = 1; d < t.shape().size(); ++d) row *= t.shape()[d];
      if (outputs.size() != 1) out += (first ? "" : ", ") + json_string(name) + ": ";
      append_block(out, t, 1, i * row, is_bytes_output(name, t));
      first = false;
    }
    if (outputs.size() != 1) out += '}';
  }
  return out + "]}";
}

// ---- base64 ---------------------------------------------------------------------------------

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v =
        (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= uint8_t(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=') --end;
  if (text.size() - end > 2) invalid("b64: too much padding at offset " + std::to_string(end));
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < end; ++i) {
    const int v = value(text[i]);
    if (v < 0)
      invalid("b64: '" + std::string(1, text[i]) + "' at offset " + std::to_string(i) +
              " is not a base64 character");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  if (bits >= 6)
    invalid("b64: the text ends in the middle of a byte (" + std::to_string(end) + " characters)");
  return out;
}

}  // namespace kiln::serving

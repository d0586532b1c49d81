// TF Serving's REST predict format (api_rest.md): a request body decoded into a signature's
// input tensors, and output tensors encoded as the response body. Row ("instances") and
// columnar ("inputs") requests, named or single inputs and outputs, {"b64": ...} values and
// the NaN / Infinity / -Infinity tokens.
//
// Kiln has no string dtype: a {"b64": "..."} value is bytes, decoded into the innermost
// dimension of a u8 input (an image's raw pixels, say); a u8 output whose name ends in
// "_bytes" is returned as {"b64": ...} values, one per innermost row.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io/saved_model.h"
#include "kiln/tensor.h"

namespace kiln::serving {

enum class RequestFormat { kRow, kColumnar };

struct PredictRequest {
  std::string signature_name;  // the one asked for, or "serving_default"
  RequestFormat format = RequestFormat::kRow;
  std::map<std::string, Tensor> inputs;  // by the signature's input names, each batched
};

// Decodes a predict body against the model's signatures. Every input of the signature must be
// given, no other, each with the signature's dtype (JSON numbers are converted to it) and
// inner dimensions. Throws kiln::Error: kInvalidArgument naming the input, the expected and
// the given shape or dtype (or the JSON offset of a syntax error); kNotFound for an unknown
// signature.
PredictRequest parse_predict_request(std::string_view body,
                                     const std::map<std::string, io::SignatureInfo>& signatures);

// The response body for `outputs`: {"predictions": ...} for a row request (a list of values
// per example for one output, of objects for several, which must then share their first
// dimension), {"outputs": ...} for a columnar one (the value, or an object by name).
std::string format_predict_response(const std::map<std::string, Tensor>& outputs,
                                    RequestFormat format);

// The checks every predict API makes (REST here, gRPC in serving/grpc_server.h), throwing
// kiln::Error. find_signature: kNotFound naming the signatures there are. check_input_names:
// kInvalidArgument naming an input that is not the signature's or one it lacks (`where`
// prefixes the message). check_input_shape: kInvalidArgument naming the input, its shape and
// the signature's type, when the rank or a known dimension differs.
const io::SignatureInfo& find_signature(const std::map<std::string, io::SignatureInfo>& signatures,
                                        const std::string& name);
void check_input_names(const std::vector<std::string>& given,
                       const std::map<std::string, TensorType>& want, const std::string& where);
void check_input_shape(const std::string& name, const Tensor& t, const TensorType& want);

// Whether output `name` is written as bytes (REST: {"b64": ...}; gRPC: DT_STRING), one value per
// innermost row: a u8 output, not a scalar, whose name ends in "_bytes".
bool is_bytes_output(const std::string& name, const Tensor& t);

// {"error": "<message>"}, the message escaped.
std::string error_json(std::string_view message);

// `s` as a JSON string literal, quotes included.
std::string json_string(std::string_view s);

// Standard base64 (RFC 4648, with padding; decoding also accepts the URL-safe alphabet and
// missing padding). decode throws kInvalidArgument naming the offending offset.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text);

}  // namespace kiln::serving

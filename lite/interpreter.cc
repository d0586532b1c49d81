// The lite Interpreter: reads and checks a model file (lite/format.h) once, packs each op's
// weights for the CPU's kernels, then runs ops in file order over buffers planned per batch
// size.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "kiln/lite.h"
#include "lite/builder.h"
#include "lite/format.h"
#include "lite/kernels.h"
#include "lite/thread_pool.h"

namespace kiln::lite {

using format::OpCode;
using kernels::Activation;

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "f32";
    case DType::kInt8:
      return "i8";
    case DType::kInt32:
      return "i32";
  }
  return "unknown";
}

size_t dtype_size(DType dtype) { return dtype == DType::kInt8 ? 1 : 4; }

namespace {

// Activations of one example hold at most this many elements: a bound that keeps a damaged
// shape from asking for terabytes.
constexpr int64_t kMaxExampleElements = int64_t{1} << 28;
constexpr int64_t kMaxDim = int64_t{1} << 31;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += shape[i] < 0 ? "?" : std::to_string(shape[i]);
  }
  return s + "]";
}

// Elements of one example (the dimensions after the batch), or of a whole constant.
int64_t elements(const std::vector<int64_t>& shape, size_t from) {
  int64_t n = 1;
  for (size_t i = from; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// One op, checked and prepared to run.
struct Op {
  OpCode code;
  Activation activation;
  std::vector<int> in;
  int out;
  ModelBuilder::Params params{};
  kernels::Window window;
  bool im2col = false;
  std::unique_ptr<kernels::PackedInt8> packed_int8;
  std::unique_ptr<kernels::PackedF32> packed_f32;
  std::vector<int32_t> bias_int32;
  std::vector<kernels::Requant> requant;
  const float* bias_f32 = nullptr;
  kernels::QuantGemmParams quant;
  std::unique_ptr<kernels::QuantGemm> gemm_int8;  // packed_int8 with quant, prepared
  std::vector<uint8_t> depthwise_weights;         // kDepthwiseConv2D: [kh][kw][m] (f32 or i8)
  kernels::QuantAddParams add;                    // kAdd, int8
  std::vector<kernels::Requant> concat;           // kConcatenate, int8: per input to the output
  // A Conv2D with the MaxPool2D after it fused (fuse_pools): the GEMM takes the max of each
  // pool_h x pool_w window and writes `write`, the pool's output; the pool op is `fused` and
  // does not run.
  int64_t pool_h = 1, pool_w = 1;
  int write = -1;  // the tensor run_op writes: `out`, or the fused pool's output
  bool fused = false;
};

}  // namespace

struct Interpreter::Impl {
  Options options;
  std::string source;  // the path, or "buffer", for messages
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  void* mapping = nullptr;  // munmap'd on destruction
  std::unique_ptr<uint8_t[], void (*)(void*)> owned{nullptr, std::free};

  std::vector<TensorInfo> tensors;
  std::vector<const uint8_t*> constant_data;
  std::vector<OpInfo> op_infos;
  std::vector<Op> ops;
  int input = -1, output = -1;
  kernels::Path int8_path = kernels::Path::kReference, float_path = kernels::Path::kReference;
  std::unique_ptr<ThreadPool> pool;

  // Per batch size: each activation's buffer.
  int64_t batch = -1;
  std::vector<int> buffer_of;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<uint8_t> scratch;
  std::vector<uint8_t> input_copy;   // an int8 input quantized, or a kept float input
  std::vector<const uint8_t*> data;  // during and after a run
  std::vector<double> op_seconds;    // under Options::profile

  ~Impl() {
    if (mapping != nullptr) ::munmap(mapping, size);
  }

  [[noreturn]] void damaged(const std::string& what, uint64_t offset) const {
    throw Error(ErrorCode::kDataLoss, "kiln::lite: " + source + ": " + what + " (at offset " +
                                          std::to_string(offset) + ")");
  }
  [[noreturn]] void bad_op(size_t index, const std::string& what) const {
    const OpInfo& op = op_infos[index];
    throw Error(ErrorCode::kInvalidArgument, "kiln::lite: " + source + ": op " +
                                                 std::to_string(index) + " (" + op.name + ", " +
                                                 op.type + "): " + what);
  }

  void load();
  void parse();
  void check_op(size_t index);
  std::pair<int64_t, int64_t> check_window(size_t index, const kernels::Window& win,
                                           int x_index) const;
  void prepare(size_t index);
  void fuse_pools();
  void plan(int64_t batch_size);
  void run(const float* input_data, int64_t batch_size, float* output_data);
  void run_op(const Op& op);
  std::string describe(int tensor) const {
    const TensorInfo& t = tensors[tensor];
    return t.name + " " + dtype_name(t.dtype) + shape_str(t.shape);
  }
};

void Interpreter::Impl::parse() {
  if (size < format::kHeaderSize) {
    damaged("truncated: " + std::to_string(size) + " bytes, fewer than the " +
                std::to_string(format::kHeaderSize) + "-byte header",
            size);
  }
  if (std::memcmp(bytes, format::kMagic, 8) != 0) damaged("not a Kiln lite model file", 0);
  const uint32_t version = static_cast<uint32_t>(format::get(bytes + 8, 4));
  if (version != format::kVersion) {
    throw Error(ErrorCode::kUnimplemented,
                "kiln::lite: " + source + ": file version " + std::to_string(version) +
                    "; this runtime reads version " + std::to_string(format::kVersion));
  }
  if (format::get(bytes + 12, 4) != format::kHeaderSize) damaged("bad header size", 12);
  const uint64_t file_size = format::get(bytes + 16, 8);
  if (file_size != size) {
    damaged("the header says " + std::to_string(file_size) + " bytes, the file has " +
                std::to_string(size) + (file_size > size ? " (truncated)" : ""),
            16);
  }
  const uint32_t crc = static_cast<uint32_t>(format::get(bytes + 24, 4));
  if (format::file_checksum(bytes, size) != crc) {
    damaged("checksum mismatch: the file is damaged", 24);
  }
  const uint64_t num_tensors = format::get(bytes + 28, 4), num_ops = format::get(bytes + 32, 4);
  const uint64_t names_size = format::get(bytes + 44, 4), data_offset = format::get(bytes + 48, 8);
  const uint64_t names_at = format::kHeaderSize + num_tensors * format::kTensorRecordSize +
                            num_ops * format::kOpRecordSize;
  if (names_at + names_size > size) damaged("the tables run past the end of the file", 28);
  if (data_offset < names_at + names_size || data_offset > size ||
      data_offset % format::kDataAlignment != 0) {
    damaged("bad data offset " + std::to_string(data_offset), 48);
  }
  auto name_at = [&](const uint8_t* rec, uint64_t rec_offset) {
    const uint64_t off = format::get(rec, 4), len = format::get(rec + 4, 4);
    if (off + len > names_size) damaged("a name runs past the names section", rec_offset);
    return std::string(reinterpret_cast<const char*>(bytes + names_at + off), len);
  };

  for (uint64_t i = 0; i < num_tensors; ++i) {
    const uint64_t at = format::kHeaderSize + i * format::kTensorRecordSize;
    const uint8_t* rec = bytes + at;
    TensorInfo t;
    t.name = name_at(rec, at);
    const std::string which = "tensor " + std::to_string(i) + " (" + t.name + ")";
    if (rec[8] > static_cast<uint8_t>(DType::kInt32)) {
      damaged(which + ": unknown dtype " + std::to_string(rec[8]), at + 8);
    }
    t.dtype = static_cast<DType>(rec[8]);
    const int rank = rec[9];
    if (rank > format::kMaxRank) damaged(which + ": rank " + std::to_string(rank), at + 9);
    if (rec[10] > 1) damaged(which + ": bad constant flag", at + 10);
    t.constant = rec[10] == 1;
    t.scale = format::get_f32(rec + 12);
    t.zero_point = static_cast<int32_t>(format::get(rec + 16, 4));
    for (int d = 0; d < rank; ++d) {
      const int64_t dim = static_cast<int64_t>(format::get(rec + 24 + 8 * d, 8));
      const bool batch_dim = d == 0 && !t.constant && dim == -1;
      if (!batch_dim && (dim < 1 || dim > kMaxDim)) {
        damaged(which + ": dimension " + std::to_string(d) + " is " + std::to_string(dim),
                at + 24 + 8 * d);
      }
      t.shape.push_back(dim);
    }
    if (!t.constant && (rank == 0 || t.shape[0] != -1)) {
      damaged(which + ": an activation's first dimension must be the batch (-1)", at + 24);
    }
    int64_t count = 1;
    for (size_t d = t.constant ? 0 : 1; d < t.shape.size(); ++d) {
      if (count > kMaxExampleElements / t.shape[d]) {
        damaged(which + ": shape " + shape_str(t.shape) + " is too large", at + 24);
      }
      count *= t.shape[d];
    }
    // A constant int8 tensor is a weight: its scales are a tensor of their own.
    if (t.dtype == DType::kInt8 && !t.constant &&
        (!std::isfinite(t.scale) || t.scale <= 0.f || t.zero_point < -128 || t.zero_point > 127)) {
      damaged(which + ": int8 scale " + std::to_string(t.scale) + " and zero point " +
                  std::to_string(t.zero_point) + " are not valid",
              at + 12);
    }
    const uint8_t* data = nullptr;
    if (t.constant) {
      const uint64_t off = format::get(rec + 72, 8), len = format::get(rec + 80, 8);
      if (len != static_cast<uint64_t>(count) * dtype_size(t.dtype)) {
        damaged(which + ": " + std::to_string(len) + " bytes of data for " + dtype_name(t.dtype) +
                    shape_str(t.shape),
                at + 80);
      }
      if (off < data_offset || off % format::kDataAlignment != 0 || off > size ||
          len > size - off) {
        damaged(which + ": data at " + std::to_string(off) + " is outside the data section",
                at + 72);
      }
      data = bytes + off;
    }
    tensors.push_back(std::move(t));
    constant_data.push_back(data);
  }

  for (uint64_t i = 0; i < num_ops; ++i) {
    const uint64_t at =
        format::kHeaderSize + num_tensors * format::kTensorRecordSize + i * format::kOpRecordSize;
    const uint8_t* rec = bytes + at;
    const uint16_t code = static_cast<uint16_t>(format::get(rec, 2));
    OpInfo info;
    info.name = name_at(rec + 4, at + 4);
    if (code == 0 || code > format::kMaxOpCode) {
      damaged("op " + std::to_string(i) + " (" + info.name + "): unknown opcode " +
                  std::to_string(code),
              at);
    }
    info.type = format::op_name(static_cast<OpCode>(code));
    if (rec[2] > static_cast<uint8_t>(Activation::kRelu6)) {
      damaged("op " + std::to_string(i) + " (" + info.name + "): unknown activation", at + 2);
    }
    if (rec[3] > format::kMaxOpInputs) {
      damaged(
          "op " + std::to_string(i) + " (" + info.name + "): " + std::to_string(rec[3]) + " inputs",
          at + 3);
    }
    Op op;
    op.code = static_cast<OpCode>(code);
    op.activation = static_cast<Activation>(rec[2]);
    auto tensor_index = [&](uint64_t field) {
      const int32_t v = static_cast<int32_t>(format::get(rec + field, 4));
      if (v < -1 || v >= static_cast<int64_t>(num_tensors)) {
        damaged("op " + std::to_string(i) + " (" + info.name + "): tensor index " +
                    std::to_string(v) + " out of range",
                at + field);
      }
      return static_cast<int>(v);
    };
    for (int j = 0; j < rec[3]; ++j) op.in.push_back(tensor_index(12 + 4 * j));
    op.out = tensor_index(28);
    if (op.out < 0) damaged("op " + std::to_string(i) + " (" + info.name + "): no output", at);
    for (int j = 0; j < format::kNumParams; ++j) {
      op.params[j] = static_cast<int32_t>(format::get(rec + 32 + 4 * j, 4));
    }
    info.inputs = op.in;
    info.output = op.out;
    op_infos.push_back(std::move(info));
    ops.push_back(std::move(op));
  }
  const uint64_t in = format::get(bytes + 36, 4), out = format::get(bytes + 40, 4);
  if (in >= num_tensors) damaged("input tensor index " + std::to_string(in) + " out of range", 36);
  if (out >= num_tensors) {
    damaged("output tensor index " + std::to_string(out) + " out of range", 40);
  }
  input = static_cast<int>(in);
  output = static_cast<int>(out);
}

// A conv's or pool's window over NHWC input `x_index`: sizes and strides positive, each pad
// smaller than the window, the window inside the padded input. Returns the output's height and
// width.
std::pair<int64_t, int64_t> Interpreter::Impl::check_window(size_t index,
                                                            const kernels::Window& win,
                                                            int x_index) const {
  const std::vector<int64_t>& x = tensors[x_index].shape;
  const bool ok = win.kh >= 1 && win.kw >= 1 && win.kh <= 4096 && win.kw <= 4096 &&
                  win.stride_h >= 1 && win.stride_w >= 1 && win.pad_top >= 0 && win.pad_left >= 0 &&
                  win.pad_bottom >= 0 && win.pad_right >= 0 && win.pad_top < win.kh &&
                  win.pad_bottom < win.kh && win.pad_left < win.kw && win.pad_right < win.kw &&
                  x[1] + win.pad_top + win.pad_bottom >= win.kh &&
                  x[2] + win.pad_left + win.pad_right >= win.kw;
  if (!ok) {
    bad_op(index, "window " + std::to_string(win.kh) + "x" + std::to_string(win.kw) + ", strides " +
                      std::to_string(win.stride_h) + "," + std::to_string(win.stride_w) +
                      ", pads (top, left, bottom, right) " + std::to_string(win.pad_top) + "," +
                      std::to_string(win.pad_left) + "," + std::to_string(win.pad_bottom) + "," +
                      std::to_string(win.pad_right) + " does not fit input " + describe(x_index));
  }
  return {win.out_h(x[1]), win.out_w(x[2])};
}

// Checks that op `index` reads tensors that exist by then, with the dtypes and shapes its
// kind needs, and writes the shape its inputs give.
void Interpreter::Impl::check_op(size_t index) {
  const Op& op = ops[index];
  auto need_inputs = [&](size_t lo, size_t hi) {
    if (op.in.size() < lo || op.in.size() > hi) {
      bad_op(index, "takes " + std::to_string(lo) + (lo == hi ? "" : "-" + std::to_string(hi)) +
                        " inputs, has " + std::to_string(op.in.size()));
    }
  };
  const TensorInfo& out = tensors[op.out];
  if (out.constant) bad_op(index, "writes the constant " + out.name);
  if (op.activation != Activation::kNone && op.code != OpCode::kFullyConnected &&
      op.code != OpCode::kConv2D && op.code != OpCode::kDepthwiseConv2D) {
    bad_op(index, "only FullyConnected, Conv2D and DepthwiseConv2D fuse an activation");
  }
  const int x_index = op.in.empty() ? -1 : op.in[0];
  if (x_index < 0) bad_op(index, "has no input");
  const TensorInfo& x = tensors[x_index];
  if (x.constant) bad_op(index, "reads the constant " + x.name + " as its activation input");
  auto same_quantization = [&] {
    if (x.dtype != out.dtype) {
      bad_op(index,
             "input " + describe(x_index) + " and output " + describe(op.out) + " differ in dtype");
    }
    if (x.dtype == DType::kInt8 && (x.scale != out.scale || x.zero_point != out.zero_point)) {
      bad_op(index, "an int8 input and output must share scale and zero point");
    }
  };
  auto expect_out = [&](const std::vector<int64_t>& shape) {
    if (out.shape != shape) {
      bad_op(index, "output " + describe(op.out) + " should be " + shape_str(shape) +
                        " from input " + describe(x_index));
    }
  };
  switch (op.code) {
    case OpCode::kFullyConnected:
    case OpCode::kConv2D:
    case OpCode::kDepthwiseConv2D: {
      const bool depthwise = op.code == OpCode::kDepthwiseConv2D;
      const bool conv = op.code == OpCode::kConv2D || depthwise;
      need_inputs(2, 4);
      const int w_index = op.in[1];
      if (w_index < 0 || !tensors[w_index].constant)
        bad_op(index, "its weights must be a constant");
      const TensorInfo& w = tensors[w_index];
      if (x.dtype == DType::kInt32 || w.dtype != x.dtype || out.dtype != x.dtype) {
        bad_op(index, "input " + describe(x_index) + ", weights " + describe(w_index) +
                          " and output " + describe(op.out) + " must be all f32 or all i8");
      }
      const size_t rank = conv ? 4 : 2;
      if (x.shape.size() != rank || w.shape.size() != rank) {
        bad_op(index, "input " + describe(x_index) + " and weights " + describe(w_index) +
                          " must have rank " + std::to_string(rank));
      }
      const int64_t m = w.shape[0];
      if (depthwise && (w.shape.back() != 1 || x.shape.back() < 1 || m % x.shape.back() != 0)) {
        bad_op(index, "weights " + describe(w_index) + " do not chain with input " +
                          describe(x_index) + ": a depthwise convolution's are [m, kh, kw, 1] " +
                          "with m a multiple of the " + std::to_string(x.shape.back()) +
                          " input channels");
      }
      if (!depthwise && w.shape.back() != x.shape.back()) {
        bad_op(index, "weights " + describe(w_index) + " do not chain with input " +
                          describe(x_index) + ": " + std::to_string(w.shape.back()) + " vs " +
                          std::to_string(x.shape.back()) + " input channels");
      }
      if (conv) {
        kernels::Window win = ModelBuilder::window_of(op.params);
        if (win.kh != w.shape[1] || win.kw != w.shape[2]) {
          bad_op(index, "window " + std::to_string(win.kh) + "x" + std::to_string(win.kw) +
                            " differs from the weights' " + describe(w_index));
        }
        const auto [oh, ow] = check_window(index, win, x_index);
        // im2col's patches of one image: bounded like an activation.
        if (oh * ow > kMaxExampleElements / std::max<int64_t>(1, elements(w.shape, 1))) {
          bad_op(index, "the patches of input " + describe(x_index) + " are too large");
        }
        expect_out({-1, oh, ow, m});
      } else {
        expect_out({-1, m});
      }
      const DType bias_dtype = x.dtype == DType::kInt8 ? DType::kInt32 : DType::kFloat32;
      if (op.in.size() > 2 && op.in[2] >= 0) {
        const TensorInfo& b = tensors[op.in[2]];
        if (!b.constant || b.dtype != bias_dtype || b.shape != std::vector<int64_t>{m}) {
          bad_op(index, "its bias " + describe(op.in[2]) + " should be a constant " +
                            dtype_name(bias_dtype) + "[" + std::to_string(m) + "]");
        }
      }
      if (x.dtype == DType::kInt8) {
        if (op.in.size() < 4 || op.in[3] < 0) bad_op(index, "int8 weights need their scales");
        const TensorInfo& s = tensors[op.in[3]];
        if (!s.constant || s.dtype != DType::kFloat32 || s.shape != std::vector<int64_t>{m}) {
          bad_op(index, "its weight scales " + describe(op.in[3]) + " should be f32[" +
                            std::to_string(m) + "]");
        }
        const float* scales = reinterpret_cast<const float*>(constant_data[op.in[3]]);
        for (int64_t j = 0; j < m; ++j) {
          if (!std::isfinite(scales[j]) || scales[j] <= 0.f) {
            bad_op(index, "weight scale " + std::to_string(j) + " is " + std::to_string(scales[j]));
          }
        }
      }
      break;
    }
    case OpCode::kMaxPool2D:
    case OpCode::kAvgPool2D: {
      need_inputs(1, 1);
      same_quantization();
      if (x.dtype == DType::kInt32) bad_op(index, "pools f32 or i8, not i32");
      if (x.shape.size() != 4) bad_op(index, "input " + describe(x_index) + " is not NHWC");
      const auto [oh, ow] = check_window(index, ModelBuilder::window_of(op.params), x_index);
      expect_out({-1, oh, ow, x.shape[3]});
      break;
    }
    case OpCode::kReshape:
      need_inputs(1, 1);
      same_quantization();
      if (elements(x.shape, 1) != elements(out.shape, 1)) {
        bad_op(index, "cannot reshape " + describe(x_index) + " to " + describe(op.out));
      }
      break;
    case OpCode::kSoftmax:
      need_inputs(1, 1);
      if (x.dtype != DType::kFloat32 || out.dtype != DType::kFloat32) {
        bad_op(index, "softmax runs on f32");
      }
      expect_out(x.shape);
      break;
    case OpCode::kAdd:
    case OpCode::kConcatenate: {
      const bool add = op.code == OpCode::kAdd;
      add ? need_inputs(2, 2) : need_inputs(2, format::kMaxOpInputs);
      if (x.dtype == DType::kInt32 || out.dtype != x.dtype) {
        bad_op(index, "joins f32 or i8 inputs into an output of their dtype, not " +
                          describe(x_index) + " into " + describe(op.out));
      }
      std::vector<int64_t> shape = x.shape;
      for (size_t j = 1; j < op.in.size(); ++j) {
        const int t = op.in[j];
        if (t < 0 || tensors[t].constant || tensors[t].dtype != x.dtype ||
            tensors[t].shape.size() != x.shape.size()) {
          bad_op(index, "input " + (t < 0 ? std::string("-1") : describe(t)) + " does not match " +
                            describe(x_index));
        }
        const std::vector<int64_t>& other = tensors[t].shape;
        const bool same_but_last = std::equal(other.begin(), other.end() - 1, shape.begin());
        if (add ? other != shape : !same_but_last) {
          bad_op(index, "input " + describe(t) + " does not match " + describe(x_index));
        }
        if (!add) shape.back() += other.back();
      }
      expect_out(shape);
      break;
    }
    case OpCode::kActivation:
      need_inputs(1, 1);
      if (x.dtype != DType::kFloat32 || out.dtype != DType::kFloat32) {
        bad_op(index, "activations run on f32");
      }
      if (op.params[0] < 1 || op.params[0] > format::kMaxFloatActivation) {
        bad_op(index, "unknown activation " + std::to_string(op.params[0]));
      }
      expect_out(x.shape);
      break;
    case OpCode::kChannelAffine:
    case OpCode::kLayerNorm: {
      need_inputs(3, 3);
      const bool norm = op.code == OpCode::kLayerNorm;
      if (x.dtype != DType::kFloat32 || out.dtype != DType::kFloat32 || x.shape.empty()) {
        bad_op(index, "runs on f32 with a last dimension, not " + describe(x_index));
      }
      for (int j : {1, 2}) {
        const int t = op.in[j];
        if (t < 0 || !tensors[t].constant || tensors[t].dtype != DType::kFloat32 ||
            tensors[t].shape != std::vector<int64_t>{x.shape.back()}) {
          bad_op(index, std::string(norm ? (j == 1 ? "gamma " : "beta ")
                                         : (j == 1 ? "scale " : "shift ")) +
                            (t < 0 ? std::string("-1") : describe(t)) +
                            " is not an f32 constant [" + std::to_string(x.shape.back()) + "]");
        }
      }
      if (norm) {
        const float epsilon = std::bit_cast<float>(op.params[0]);
        if (!(epsilon >= 0.f) || !std::isfinite(epsilon)) {
          bad_op(index, "epsilon " + std::to_string(epsilon) + " is not a finite number >= 0");
        }
      }
      expect_out(x.shape);
      break;
    }
    case OpCode::kQuantize:
    case OpCode::kDequantize: {
      need_inputs(1, 1);
      const bool q = op.code == OpCode::kQuantize;
      if (x.dtype != (q ? DType::kFloat32 : DType::kInt8) ||
          out.dtype != (q ? DType::kInt8 : DType::kFloat32)) {
        bad_op(index, std::string(q ? "quantizes f32 to i8" : "dequantizes i8 to f32") + ", not " +
                          describe(x_index) + " to " + describe(op.out));
      }
      expect_out(x.shape);
      break;
    }
  }
}

void Interpreter::Impl::prepare(size_t index) {
  Op& op = ops[index];
  op.write = op.out;
  const TensorInfo& y = tensors[op.out];
  if (y.dtype == DType::kInt8 && op.code == OpCode::kAdd) {
    const TensorInfo& a = tensors[op.in[0]];
    const TensorInfo& b = tensors[op.in[1]];
    op.add = kernels::quant_add_params(a.scale, a.zero_point, b.scale, b.zero_point, y.scale,
                                       y.zero_point);
  }
  if (y.dtype == DType::kInt8 && op.code == OpCode::kConcatenate) {
    for (int t : op.in) {
      op.concat.push_back(kernels::quantize_multiplier(static_cast<double>(tensors[t].scale) /
                                                       static_cast<double>(y.scale)));
    }
  }
  const bool depthwise = op.code == OpCode::kDepthwiseConv2D;
  if (op.code != OpCode::kFullyConnected && op.code != OpCode::kConv2D && !depthwise) {
    op.window = ModelBuilder::window_of(op.params);
    return;
  }
  const TensorInfo& x = tensors[op.in[0]];
  const TensorInfo& w = tensors[op.in[1]];
  const TensorInfo& out = tensors[op.out];
  const int64_t m = w.shape[0], k = elements(w.shape, 1);
  if (depthwise) {
    // [m][kh][kw] -> [kh][kw][m]: the kernel reads all channels of one tap together.
    op.window = ModelBuilder::window_of(op.params);
    const size_t bytes = dtype_size(w.dtype);
    op.depthwise_weights.resize(m * k * bytes);
    for (int64_t o = 0; o < m; ++o) {
      for (int64_t t = 0; t < k; ++t) {
        std::memcpy(&op.depthwise_weights[(t * m + o) * bytes],
                    constant_data[op.in[1]] + (o * k + t) * bytes, bytes);
      }
    }
  }
  if (op.code == OpCode::kConv2D) {
    op.window = ModelBuilder::window_of(op.params);
    const kernels::Window& win = op.window;
    op.im2col =
        !(win.kh == 1 && win.kw == 1 && win.stride_h == 1 && win.stride_w == 1 &&
          win.pad_top == 0 && win.pad_left == 0 && win.pad_bottom == 0 && win.pad_right == 0);
  }
  const bool has_bias = op.in.size() > 2 && op.in[2] >= 0;
  if (x.dtype == DType::kFloat32) {
    if (!depthwise) {
      op.packed_f32 = std::make_unique<kernels::PackedF32>(
          reinterpret_cast<const float*>(constant_data[op.in[1]]), m, k, float_path);
    }
    if (has_bias) op.bias_f32 = reinterpret_cast<const float*>(constant_data[op.in[2]]);
    return;
  }
  if (!depthwise) {
    op.packed_int8 = std::make_unique<kernels::PackedInt8>(
        reinterpret_cast<const int8_t*>(constant_data[op.in[1]]), m, k, int8_path);
  }
  const float* scales = reinterpret_cast<const float*>(constant_data[op.in[3]]);
  op.bias_int32.assign(m, 0);
  if (has_bias) {
    std::memcpy(op.bias_int32.data(), constant_data[op.in[2]], m * sizeof(int32_t));
  }
  for (int64_t j = 0; j < m; ++j) {
    op.requant.push_back(
        kernels::quantize_multiplier(static_cast<double>(x.scale) * static_cast<double>(scales[j]) /
                                     static_cast<double>(out.scale)));
  }
  op.quant.a_zero_point = x.zero_point;
  op.quant.out_zero_point = out.zero_point;
  op.quant.out_min = -128;
  op.quant.out_max = 127;
  if (op.activation != Activation::kNone) op.quant.out_min = std::max(-128, out.zero_point);
  if (op.activation == Activation::kRelu6) {
    const double six = std::round(6.0 / out.scale) + out.zero_point;
    op.quant.out_max = static_cast<int32_t>(std::min(127.0, six));
  }
  op.quant.bias = op.bias_int32.data();
  op.quant.requant = op.requant.data();
  if (!depthwise) op.gemm_int8 = std::make_unique<kernels::QuantGemm>(*op.packed_int8, op.quant);
}

// A Conv2D whose output only the MaxPool2D right after it reads, when that pool's windows tile
// the output (no padding, stride = window, of 2 or 4 positions): the GEMM pools its rows
// (kernels' pool_rows), the rows the pool would drop are never computed, and the conv's own
// output never exists. The same bits as the two ops apart (kernels.h says why), in float and
// int8. Not when every tensor is kept: the conv's output would have no values.
void Interpreter::Impl::fuse_pools() {
  if (options.preserve_all_tensors) return;
  std::vector<int> readers(tensors.size(), 0);
  for (const Op& op : ops) {
    for (int t : op.in) {
      if (t >= 0) ++readers[t];
    }
  }
  for (size_t i = 0; i + 1 < ops.size(); ++i) {
    Op& conv = ops[i];
    Op& pool = ops[i + 1];
    if (conv.code != OpCode::kConv2D || pool.code != OpCode::kMaxPool2D || pool.in[0] != conv.out ||
        readers[conv.out] != 1 || conv.out == output) {
      continue;
    }
    const kernels::Window& win = pool.window;
    const int64_t rows = win.kh * win.kw;
    if (win.stride_h != win.kh || win.stride_w != win.kw || win.pad_top != 0 || win.pad_left != 0 ||
        win.pad_bottom != 0 || win.pad_right != 0 || (rows != 2 && rows != kernels::kMaxPoolRows)) {
      continue;
    }
    conv.pool_h = win.kh;
    conv.pool_w = win.kw;
    conv.write = pool.out;
    conv.im2col = true;  // the patch rows go in pooled order
    pool.fused = true;
    op_infos[i + 1].fused = true;
  }
}

// Gives each activation a buffer for `batch_size` examples. Unless every tensor is kept, a
// buffer is reused once the last op reading its tensor has run.
void Interpreter::Impl::plan(int64_t batch_size) {
  const int n = static_cast<int>(tensors.size());
  std::vector<int> last_use(n, -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int t : ops[i].in) {
      if (t >= 0) last_use[t] = static_cast<int>(i);
    }
  }
  last_use[output] = std::numeric_limits<int>::max();
  std::vector<size_t> need;
  buffer_of.assign(n, -1);
  std::vector<int> free_buffers;
  auto bytes_of = [&](int t) {
    return static_cast<size_t>(batch_size) * elements(tensors[t].shape, 1) *
           dtype_size(tensors[t].dtype);
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].fused) continue;  // its conv wrote its output; it reads no buffer
    const int t = ops[i].write;
    int b;
    if (!options.preserve_all_tensors && !free_buffers.empty()) {
      b = free_buffers.back();
      free_buffers.pop_back();
    } else {
      b = static_cast<int>(need.size());
      need.push_back(0);
    }
    need[b] = std::max(need[b], bytes_of(t));
    buffer_of[t] = b;
    if (options.preserve_all_tensors) continue;
    for (int in : ops[i].in) {
      if (in >= 0 && last_use[in] == static_cast<int>(i) && buffer_of[in] >= 0 &&
          std::find(free_buffers.begin(), free_buffers.end(), buffer_of[in]) ==
              free_buffers.end()) {
        free_buffers.push_back(buffer_of[in]);
      }
    }
  }
  buffers.resize(need.size());
  for (size_t b = 0; b < need.size(); ++b) buffers[b].resize(need[b]);
  size_t scratch_bytes = 0;
  for (const Op& op : ops) {
    if (!op.im2col) continue;
    const TensorInfo& out = tensors[op.out];
    const size_t rows = static_cast<size_t>(batch_size) * out.shape[1] * out.shape[2];
    const size_t k = elements(tensors[op.in[1]].shape, 1);
    scratch_bytes = std::max(scratch_bytes, rows * k * dtype_size(out.dtype));
  }
  scratch.resize(scratch_bytes);
  batch = batch_size;
}

void Interpreter::Impl::run(const float* input_data, int64_t batch_size, float* output_data) {
  if (batch_size < 1 || batch_size > kMaxExampleElements) {
    throw Error(ErrorCode::kInvalidArgument,
                "kiln::lite: run: batch size " + std::to_string(batch_size) + " is not valid");
  }
  if (batch_size != batch) {
    try {
      plan(batch_size);
    } catch (const std::bad_alloc&) {
      batch = -1;
      throw Error(ErrorCode::kResourceExhausted,
                  "kiln::lite: run: out of memory planning buffers for batch " +
                      std::to_string(batch_size));
    }
  }
  data.assign(tensors.size(), nullptr);
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].constant) data[t] = constant_data[t];
    if (buffer_of[t] >= 0) data[t] = buffers[buffer_of[t]].data();
  }
  const TensorInfo& in = tensors[input];
  const int64_t in_count = batch_size * elements(in.shape, 1);
  // A float input is read in place, or copied when every tensor is kept (the caller's buffer
  // may be gone when tensor_data reads it).
  if (in.dtype == DType::kFloat32 && !options.preserve_all_tensors) {
    data[input] = reinterpret_cast<const uint8_t*>(input_data);
  } else if (in.dtype == DType::kFloat32) {
    input_copy.resize(in_count * sizeof(float));
    std::memcpy(input_copy.data(), input_data, in_count * sizeof(float));
    data[input] = input_copy.data();
  } else {
    input_copy.resize(in_count);
    kernels::quantize_f32(input_data, in_count, in.scale, in.zero_point,
                          reinterpret_cast<int8_t*>(input_copy.data()));
    data[input] = input_copy.data();
  }
  if (options.profile) {
    op_seconds.resize(ops.size(), 0.0);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].fused) continue;
      const auto start = std::chrono::steady_clock::now();
      run_op(ops[i]);
      op_seconds[i] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  } else {
    for (const Op& op : ops) {
      if (!op.fused) run_op(op);
    }
  }
  const TensorInfo& out = tensors[output];
  const int64_t out_count = batch_size * elements(out.shape, 1);
  if (output == input) {
    std::memcpy(output_data, input_data, out_count * sizeof(float));
  } else if (out.dtype == DType::kFloat32) {
    std::memcpy(output_data, data[output], out_count * sizeof(float));
  } else {
    kernels::dequantize_int8(reinterpret_cast<const int8_t*>(data[output]), out_count, out.scale,
                             out.zero_point, output_data);
  }
  if (!options.preserve_all_tensors) data[input] = nullptr;
}

void Interpreter::Impl::run_op(const Op& op) {
  const TensorInfo& x = tensors[op.in[0]];
  const TensorInfo& out = tensors[op.out];
  const uint8_t* src = data[op.in[0]];
  uint8_t* dst = buffers[buffer_of[op.write]].data();
  const bool int8 = x.dtype == DType::kInt8;
  const int64_t n = batch;
  // The GEMM over `rows` rows of a, split between threads in whole pool windows.
  auto rows_gemm = [&](const uint8_t* a, int64_t rows) {
    const int64_t m = tensors[op.in[1]].shape[0];
    const int64_t k = elements(tensors[op.in[1]].shape, 1);
    const int pool_rows = static_cast<int>(op.pool_h * op.pool_w);
    // Parts of at least ~4M multiply-adds: a smaller op ends sooner than a second core gets the
    // data the op before it left in this core's cache.
    const int64_t min_part = (int64_t{1} << 22) / std::max<int64_t>(1, k * m * pool_rows);
    pool->parallel_for(rows / pool_rows, std::max<int64_t>(1, min_part),
                       [&](int64_t begin, int64_t end) {
                         const int64_t first = begin * pool_rows, count = (end - begin) * pool_rows;
                         if (int8) {
                           op.gemm_int8->run(reinterpret_cast<const int8_t*>(a) + first * k, count,
                                             reinterpret_cast<int8_t*>(dst) + begin * m, pool_rows);
                         } else {
                           kernels::gemm_f32(reinterpret_cast<const float*>(a) + first * k, count,
                                             *op.packed_f32, op.bias_f32, op.activation,
                                             reinterpret_cast<float*>(dst) + begin * m, pool_rows);
                         }
                       });
  };
  const int64_t h = x.shape.size() == 4 ? x.shape[1] : 0, w = x.shape.size() == 4 ? x.shape[2] : 0;
  const int64_t c = x.shape.back();
  const int64_t in_image = elements(x.shape, 1), out_image = elements(out.shape, 1);
  switch (op.code) {
    case OpCode::kFullyConnected:
      rows_gemm(src, n);
      return;
    case OpCode::kConv2D: {
      // With a fused pool, only the positions of whole pool windows.
      const int64_t positions =
          out.shape[1] / op.pool_h * op.pool_h * (out.shape[2] / op.pool_w * op.pool_w);
      const int64_t rows = n * positions;
      if (!op.im2col) {
        rows_gemm(src, rows);
        return;
      }
      const int64_t patch = elements(tensors[op.in[1]].shape, 1) * positions;
      pool->parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        if (int8) {
          kernels::im2col_int8(reinterpret_cast<const int8_t*>(src) + begin * in_image, end - begin,
                               h, w, c, op.window, static_cast<int8_t>(x.zero_point),
                               reinterpret_cast<int8_t*>(scratch.data()) + begin * patch, op.pool_h,
                               op.pool_w);
        } else {
          kernels::im2col_f32(reinterpret_cast<const float*>(src) + begin * in_image, end - begin,
                              h, w, c, op.window,
                              reinterpret_cast<float*>(scratch.data()) + begin * patch, op.pool_h,
                              op.pool_w);
        }
      });
      rows_gemm(scratch.data(), rows);
      return;
    }
    case OpCode::kDepthwiseConv2D: {
      const int64_t m = out.shape[3];
      pool->parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        if (int8) {
          kernels::depthwise_conv_int8(
              reinterpret_cast<const int8_t*>(src) + begin * in_image, end - begin, h, w, c,
              op.window, reinterpret_cast<const int8_t*>(op.depthwise_weights.data()), m, op.quant,
              int8_path, reinterpret_cast<int8_t*>(dst) + begin * out_image);
        } else {
          kernels::depthwise_conv_f32(reinterpret_cast<const float*>(src) + begin * in_image,
                                      end - begin, h, w, c, op.window,
                                      reinterpret_cast<const float*>(op.depthwise_weights.data()),
                                      m, op.bias_f32, op.activation, float_path,
                                      reinterpret_cast<float*>(dst) + begin * out_image);
        }
      });
      return;
    }
    case OpCode::kMaxPool2D:
    case OpCode::kAvgPool2D: {
      const bool max = op.code == OpCode::kMaxPool2D;
      pool->parallel_for(n, 1, [&](int64_t begin, int64_t end) {
        const int64_t count = end - begin;
        if (int8) {
          const int8_t* xi = reinterpret_cast<const int8_t*>(src) + begin * in_image;
          int8_t* yi = reinterpret_cast<int8_t*>(dst) + begin * out_image;
          max ? kernels::max_pool_int8(xi, count, h, w, c, op.window, yi)
              : kernels::avg_pool_int8(xi, count, h, w, c, op.window, yi);
        } else {
          const float* xf = reinterpret_cast<const float*>(src) + begin * in_image;
          float* yf = reinterpret_cast<float*>(dst) + begin * out_image;
          max ? kernels::max_pool_f32(xf, count, h, w, c, op.window, yf)
              : kernels::avg_pool_f32(xf, count, h, w, c, op.window, yf);
        }
      });
      return;
    }
    case OpCode::kReshape:
      std::memcpy(dst, src, n * in_image * dtype_size(x.dtype));
      return;
    case OpCode::kSoftmax:
      kernels::softmax_f32(reinterpret_cast<const float*>(src), n * in_image / c, c,
                           reinterpret_cast<float*>(dst));
      return;
    case OpCode::kAdd: {
      const uint8_t* b = data[op.in[1]];
      const int64_t count = n * in_image;
      if (int8) {
        kernels::add_int8(reinterpret_cast<const int8_t*>(src), reinterpret_cast<const int8_t*>(b),
                          count, op.add, reinterpret_cast<int8_t*>(dst));
      } else {
        kernels::add_f32(reinterpret_cast<const float*>(src), reinterpret_cast<const float*>(b),
                         count, reinterpret_cast<float*>(dst));
      }
      return;
    }
    case OpCode::kConcatenate: {
      // Row by row of the last dimension: each input's part, requantized when its scale or
      // zero point differs from the output's.
      const size_t width = dtype_size(x.dtype);
      const int64_t rows = n * in_image / c, out_c = out.shape.back();
      int64_t at = 0;
      for (size_t j = 0; j < op.in.size(); ++j) {
        const TensorInfo& t = tensors[op.in[j]];
        const int64_t cj = t.shape.back();
        const uint8_t* from = data[op.in[j]];
        const bool same = !int8 || (t.scale == out.scale && t.zero_point == out.zero_point);
        for (int64_t r = 0; r < rows; ++r) {
          uint8_t* to = dst + (r * out_c + at) * width;
          if (same) {
            std::memcpy(to, from + r * cj * width, cj * width);
          } else {
            kernels::requantize_int8(reinterpret_cast<const int8_t*>(from) + r * cj, cj,
                                     op.concat[j], t.zero_point, out.zero_point,
                                     reinterpret_cast<int8_t*>(to));
          }
        }
        at += cj;
      }
      return;
    }
    case OpCode::kActivation:
      kernels::activation_f32(reinterpret_cast<const float*>(src), n * in_image, op.params[0],
                              reinterpret_cast<float*>(dst));
      return;
    case OpCode::kChannelAffine:
      kernels::channel_affine_f32(reinterpret_cast<const float*>(src), n * in_image / c, c,
                                  reinterpret_cast<const float*>(data[op.in[1]]),
                                  reinterpret_cast<const float*>(data[op.in[2]]),
                                  reinterpret_cast<float*>(dst));
      return;
    case OpCode::kLayerNorm:
      kernels::layer_norm_f32(reinterpret_cast<const float*>(src), n * in_image / c, c,
                              reinterpret_cast<const float*>(data[op.in[1]]),
                              reinterpret_cast<const float*>(data[op.in[2]]),
                              std::bit_cast<float>(op.params[0]), reinterpret_cast<float*>(dst));
      return;
    case OpCode::kQuantize:
      kernels::quantize_f32(reinterpret_cast<const float*>(src), n * in_image, out.scale,
                            out.zero_point, reinterpret_cast<int8_t*>(dst));
      return;
    case OpCode::kDequantize:
      kernels::dequantize_int8(reinterpret_cast<const int8_t*>(src), n * in_image, x.scale,
                               x.zero_point, reinterpret_cast<float*>(dst));
      return;
  }
}

// Parses the file, checks that its ops chain, and prepares them.
void Interpreter::Impl::load() {
  parse();
  std::vector<bool> ready(tensors.size(), false);
  for (size_t t = 0; t < tensors.size(); ++t) ready[t] = tensors[t].constant;
  const TensorInfo& in = tensors[input];
  if (in.constant) {
    throw Error(ErrorCode::kInvalidArgument,
                "kiln::lite: " + source + ": the input " + in.name + " is a constant");
  }
  if (in.dtype == DType::kInt32) {
    throw Error(ErrorCode::kInvalidArgument,
                "kiln::lite: " + source + ": the input " + in.name + " is i32");
  }
  ready[input] = true;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    for (int t : op.in) {
      if (t >= 0 && !ready[t]) {
        bad_op(i, "reads " + describe(t) + " before any op writes it");
      }
    }
    if (ready[op.out]) {
      bad_op(i, "writes " + describe(op.out) + ", which is already written");
    }
    check_op(i);
    ready[op.out] = true;
  }
  const TensorInfo& out = tensors[output];
  if (!ready[output] || out.constant) {
    throw Error(ErrorCode::kInvalidArgument,
                "kiln::lite: " + source + ": the output " + out.name + " is never written");
  }
  if (out.dtype == DType::kInt32) {
    throw Error(ErrorCode::kInvalidArgument,
                "kiln::lite: " + source + ": the output " + out.name + " is i32");
  }
  int8_path = kernels::best_int8_path();
  float_path = kernels::best_float_path();
  for (size_t i = 0; i < ops.size(); ++i) prepare(i);
  fuse_pools();
  pool = std::make_unique<ThreadPool>(std::max(1, options.num_threads));
}

std::unique_ptr<Interpreter> Interpreter::load(const std::string& path, const Options& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->source = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                "kiln::lite: cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorCode::kInvalidArgument, "kiln::lite: " + path + " is not a regular file");
  }
  impl->size = static_cast<size_t>(st.st_size);
  if (impl->size > 0) {
    void* p = ::mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(ErrorCode::kInvalidArgument,
                  "kiln::lite: cannot map " + path + ": " + std::strerror(err));
    }
    impl->mapping = p;
    impl->bytes = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  impl->load();
  return std::unique_ptr<Interpreter>(new Interpreter(std::move(impl)));
}

std::unique_ptr<Interpreter> Interpreter::from_buffer(const void* data, size_t size,
                                                      const Options& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->source = "buffer";
  // Constants are read in place: keep the copy aligned as a mapped file would be.
  const size_t rounded =
      (size + format::kDataAlignment - 1) / format::kDataAlignment * format::kDataAlignment;
  impl->owned.reset(static_cast<uint8_t*>(
      std::aligned_alloc(format::kDataAlignment, std::max<size_t>(rounded, 64))));
  if (!impl->owned) throw Error(ErrorCode::kResourceExhausted, "kiln::lite: out of memory");
  if (size > 0) std::memcpy(impl->owned.get(), data, size);
  impl->bytes = impl->owned.get();
  impl->size = size;
  impl->load();
  return std::unique_ptr<Interpreter>(new Interpreter(std::move(impl)));
}

Interpreter::Interpreter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Interpreter::~Interpreter() = default;

const TensorInfo& Interpreter::input() const { return impl_->tensors[impl_->input]; }
const TensorInfo& Interpreter::output() const { return impl_->tensors[impl_->output]; }
int64_t Interpreter::input_size() const { return elements(input().shape, 1); }
int64_t Interpreter::output_size() const { return elements(output().shape, 1); }

std::vector<float> Interpreter::run(const float* input_data, int64_t batch) {
  if (batch < 1 || batch > kMaxExampleElements) {
    throw Error(ErrorCode::kInvalidArgument,
                "kiln::lite: run: batch size " + std::to_string(batch) + " is not valid");
  }
  std::vector<float> out(batch * output_size());
  run(input_data, batch, out.data());
  return out;
}

void Interpreter::run(const float* input_data, int64_t batch, float* output_data) {
  impl_->run(input_data, batch, output_data);
}

int Interpreter::tensor_count() const { return static_cast<int>(impl_->tensors.size()); }

const TensorInfo& Interpreter::tensor(int index) const {
  if (index < 0 || index >= tensor_count()) {
    throw Error(ErrorCode::kOutOfRange, "kiln::lite: tensor " + std::to_string(index) + " of " +
                                            std::to_string(tensor_count()));
  }
  return impl_->tensors[index];
}

const std::vector<OpInfo>& Interpreter::ops() const { return impl_->op_infos; }

const void* Interpreter::tensor_data(int index) const {
  const TensorInfo& t = tensor(index);
  if (t.constant) return impl_->constant_data[index];
  if (impl_->batch < 0 || impl_->data.empty()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "kiln::lite: tensor " + t.name + " has no value before the first run");
  }
  if (!impl_->options.preserve_all_tensors && index != impl_->output) {
    throw Error(ErrorCode::kFailedPrecondition,
                "kiln::lite: tensor " + t.name +
                    " is not kept after a run; load with Options::preserve_all_tensors");
  }
  return impl_->data[index];
}

int64_t Interpreter::last_batch() const { return impl_->batch; }

const std::vector<double>& Interpreter::op_seconds() const { return impl_->op_seconds; }

std::string Interpreter::kernel_paths() const {
  return std::string("int8 ") + kernels::path_name(impl_->int8_path) + ", f32 " +
         kernels::path_name(impl_->float_path);
}

size_t Interpreter::file_size() const { return impl_->size; }

}  // namespace kiln::lite

// The lite model file, version 1: little-endian, fixed-size records, constants 64-byte aligned
// so a memory-mapped file is used in place. Written by ModelBuilder (lite/builder.h), read by
// the Interpreter (lite/interpreter.cc); docs/lite.md describes it byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kiln::lite::format {

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'L', 'I', 'T', 'E'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kHeaderSize = 64;
inline constexpr uint64_t kTensorRecordSize = 96;
inline constexpr uint64_t kOpRecordSize = 64;
inline constexpr uint64_t kDataAlignment = 64;
inline constexpr int kMaxRank = 6;
inline constexpr int kMaxOpInputs = 4;
inline constexpr int kNumParams = 8;

// Sections, in this order: header, tensor records, op records, names (UTF-8, not
// NUL-terminated), zero padding to kDataAlignment, constant data (each 64-byte aligned).
//
// Header: 0 magic[8] | 8 u32 version | 12 u32 header size | 16 u64 file size |
//   24 u32 checksum (file_checksum) | 28 u32 tensors | 32 u32 ops | 36 u32 input tensor |
//   40 u32 output tensor | 44 u32 names size | 48 u64 data offset | 56 u64 zero.
// Tensor: 0 u32 name offset | 4 u32 name length | 8 u8 dtype | 9 u8 rank | 10 u8 constant |
//   11 u8 zero | 12 f32 scale | 16 i32 zero point | 20 u32 zero | 24 i64 dims[6] (-1: batch) |
//   72 u64 data offset | 80 u64 data size | 88 u64 zero.
// Op: 0 u16 opcode | 2 u8 activation | 3 u8 input count | 4 u32 name offset | 8 u32 name length
//   | 12 i32 inputs[4] (-1: absent) | 28 i32 output | 32 i32 params[8].
enum class OpCode : uint16_t {
  // inputs: x [n,k], weights [m,k], bias [m] (f32, or i32 at scale x*w), weight scales [m]
  kFullyConnected = 1,
  // inputs: x [n,h,w,c], weights [m,kh,kw,c], bias, weight scales; params: the window
  kConv2D = 2,
  kMaxPool2D = 3,  // params: the window (kh, kw, strides, pads top, left, bottom, right)
  kAvgPool2D = 4,
  kReshape = 5,     // to the output's shape
  kSoftmax = 6,     // over the last dimension, float
  kQuantize = 7,    // float -> int8 at the output's scale and zero point
  kDequantize = 8,  // int8 -> float
  kActivation = 9,  // float, elementwise; params[0]: a FloatActivation
  // Elementwise sum of two inputs of one shape (int8: each rescaled to the output's scale).
  kAdd = 10,
  // 2-4 inputs joined along the last dimension (int8: each requantized to the output's scale).
  kConcatenate = 11,
  // float: x * scale + shift along the last dimension; inputs x, scale [c], shift [c] (f32
  // constants). An inference batch normalization that could not fold into the op before it.
  kChannelAffine = 12,
  // float: (x - mean) / sqrt(variance + epsilon) * gamma + beta over the last dimension; inputs
  // x, gamma [c], beta [c] (f32 constants); params[0]: epsilon's float bits.
  kLayerNorm = 13,
  // inputs: x [n,h,w,c], weights [m,kh,kw,1] (m = c * multiplier; output channel o reads input
  // channel o / multiplier), bias [m], weight scales [m] (int8); params: the window
  kDepthwiseConv2D = 14,
};
inline constexpr uint16_t kMaxOpCode = 14;

// The float activations an int8 model computes between a Dequantize and a Quantize.
// (A relu the converter cannot fuse into the op before it runs here too.)
enum class FloatActivation : int32_t {
  kTanh = 1,
  kSigmoid = 2,
  kSwish = 3,
  kSoftplus = 4,
  kRelu = 5,
  kGelu = 6,  // x * Phi(x), the erf form
};
inline constexpr int32_t kMaxFloatActivation = 6;
const char* op_name(OpCode code);  // "FullyConnected", ...; "unknown" past kMaxOpCode

// CRC-32C (Castagnoli) of `size` bytes appended to data whose CRC-32C is `crc` (0: none).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The file's checksum: the CRC-32C of all `size` bytes with the checksum field (offset 24) read
// as zeros, so a flipped bit anywhere, the header included, shows.
uint32_t file_checksum(const uint8_t* file, size_t size);

// Little-endian fields, whatever the host's byte order.
inline void put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
inline void put_f32(uint8_t* p, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  put(p, bits, 4);
}
inline float get_f32(const uint8_t* p) {
  const uint32_t bits = static_cast<uint32_t>(get(p, 4));
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace kiln::lite::format

// The file format's helpers: op names and the CRC-32C checksum. The checksum is its own, not
// src/api/io/crc32c's (libkiln_lite links nothing of libkiln); a byte-wise table is enough for a
// file read once, at load.
#include "lite/format.h"

#include <array>

namespace kiln::lite::format {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    table[b] = c;
  }
  return table;
}

}  // namespace

const char* op_name(OpCode code) {
  switch (code) {
    case OpCode::kFullyConnected:
      return "FullyConnected";
    case OpCode::kConv2D:
      return "Conv2D";
    case OpCode::kMaxPool2D:
      return "MaxPool2D";
    case OpCode::kAvgPool2D:
      return "AvgPool2D";
    case OpCode::kReshape:
      return "Reshape";
    case OpCode::kSoftmax:
      return "Softmax";
    case OpCode::kQuantize:
      return "Quantize";
    case OpCode::kDequantize:
      return "Dequantize";
    case OpCode::kActivation:
      return "Activation";
    case OpCode::kAdd:
      return "Add";
    case OpCode::kConcatenate:
      return "Concatenate";
    case OpCode::kChannelAffine:
      return "ChannelAffine";
    case OpCode::kLayerNorm:
      return "LayerNorm";
    case OpCode::kDepthwiseConv2D:
      return "DepthwiseConv2D";
  }
  return "unknown";
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = (crc >> 8) ^ table[(crc ^ p[i]) & 0xff];
  return ~crc;
}

uint32_t file_checksum(const uint8_t* file, size_t size) {
  if (size < kHeaderSize) return 0;
  const uint8_t zeros[4] = {};
  uint32_t crc = crc32c(file, 24);
  crc = crc32c(zeros, 4, crc);
  return crc32c(file + 28, size - 28, crc);
}

}  // namespace kiln::lite::format

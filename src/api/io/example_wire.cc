// The strict tf.Example wire reader's out-of-line parts: a Feature's list, checked, and the
// copy of its values into a batch tensor (see example_wire.h).
#include "src/api/io/example_wire.h"

#include <cstring>

namespace kiln::io::wire {
namespace {

// A packed list in at most one piece: {1: packed values}, or nothing (no values).
bool read_packed(const uint8_t* data, size_t size, FeatureView& out, int* clamps) {
  WireReader r(data, size, clamps);
  out.data = nullptr;
  out.size = 0;
  if (r.done()) return true;
  if (!r.len_field(1, out.data, out.size)) return false;
  return r.done();
}

}  // namespace

// A Feature message: {oneof: 1 bytes_list, 2 float_list, 3 int64_list}, its list checked.
bool read_feature(const uint8_t* data, size_t size, FeatureView& out, int* clamps) {
  out = FeatureView{};
  WireReader r(data, size, clamps);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.tag(field, wire) || wire != 2 || field < 1 || field > 3 || out.kind != Kind::kNone ||
        !r.bytes(out.data, out.size)) {
      return false;
    }
    out.kind = static_cast<Kind>(field);
  }
  switch (out.kind) {
    case Kind::kNone:
      return true;
    case Kind::kBytes: {  // {1: bytes}*
      WireReader list(out.data, out.size, clamps);
      while (!list.done()) {
        const uint8_t* value;
        size_t n;
        if (!list.len_field(1, value, n)) return false;
        out.count += static_cast<int64_t>(n);
      }
      return true;
    }
    case Kind::kFloat:
      if (!read_packed(out.data, out.size, out, clamps) || out.size % sizeof(float) != 0) {
        return false;
      }
      out.count = static_cast<int64_t>(out.size / sizeof(float));
      return true;
    case Kind::kInt64: {
      if (!read_packed(out.data, out.size, out, clamps)) return false;
      WireReader values(out.data, out.size);
      for (uint64_t v; !values.done(); ++out.count) {
        if (!values.varint(v)) return false;
      }
      return true;
    }
  }
  return false;
}

// Copies a view's values into `dst` (view.count elements of its kind: floats, int64s, bytes).
void copy_values(const FeatureView& v, uint8_t* dst) {
  if (v.count == 0) return;
  switch (v.kind) {
    case Kind::kFloat:
      std::memcpy(dst, v.data, v.size);
      break;
    case Kind::kInt64: {
      WireReader r(v.data, v.size);
      for (uint64_t x; !r.done(); dst += sizeof(int64_t)) {
        r.varint(x);  // checked by read_feature
        std::memcpy(dst, &x, sizeof(x));
      }
      break;
    }
    case Kind::kBytes: {
      WireReader r(v.data, v.size);
      while (!r.done()) {
        const uint8_t* value = nullptr;
        size_t n = 0;
        r.len_field(1, value, n);  // checked by read_feature
        if (n) std::memcpy(dst, value, n);
        dst += n;
      }
      break;
    }
    case Kind::kNone:
      break;
  }
}

}  // namespace kiln::io::wire

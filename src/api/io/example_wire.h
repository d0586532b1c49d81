// A strict reader of the tf.Example wire format, without copies or allocations: parse_example
// (example.cc) reads records in place with it and hands what it gives up on to protobuf.
// Internal to src/api/io.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln::io::wire {

// It reads what protobuf (and TensorFlow) write: each message field once, each packed list in
// one piece. Anything else -- a malformed byte, an unknown field, a message or list split over
// several fields (which protobuf merges), a feature with two kinds -- makes it give up, and
// that record is parsed by protobuf instead, which decides what the bytes mean. So the fast
// path never accepts bytes protobuf would refuse, nor reads them differently.

static_assert(std::endian::native == std::endian::little,
              "packed floats are copied as they are on the wire (little-endian)");

enum class Kind : uint8_t { kNone, kBytes, kFloat, kInt64 };  // kNone: no value, as if absent

// One feature's values, viewed in the serialized bytes (or in a re-serialized copy).
struct FeatureView {
  Kind kind = Kind::kNone;
  const uint8_t* data = nullptr;  // bytes: the BytesList message; floats, int64s: the packed run
  size_t size = 0;                // bytes at `data`
  int64_t count = 0;              // floats, int64s, or the total bytes of the bytes values
};

class WireReader {
 public:
  // With `clamps`, a length running past the end is cut to it and counted there (to find
  // where damaged bytes go wrong); without, it is an error.
  WireReader(const uint8_t* data, size_t size, int* clamps = nullptr)
      : p_(data), end_(data + size), clamps_(clamps) {}
  bool done() const { return p_ == end_; }
  size_t offset_from(const uint8_t* base) const { return static_cast<size_t>(p_ - base); }

  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      if (shift == 63 && b > 1) return false;  // more than 64 bits
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  // A tag or a length: protobuf reads at most 5 bytes for those, and refuses longer (padded)
  // encodings, so this does too.
  bool varint32(uint64_t& v) {
    const uint8_t* start = p_;
    return varint(v) && p_ - start <= 5 && v <= 0xffffffffu;
  }
  // A field's tag; then, for wire type 2, its bytes.
  bool tag(uint32_t& field, uint32_t& wire) {
    uint64_t t;
    if (!varint32(t) || (t >> 3) == 0) return false;
    field = static_cast<uint32_t>(t >> 3);
    wire = static_cast<uint32_t>(t & 7);
    return true;
  }
  bool bytes(const uint8_t*& data, size_t& size) {
    uint64_t n;
    if (!varint32(n)) return false;
    if (n > static_cast<uint64_t>(end_ - p_)) {
      if (!clamps_) return false;
      ++*clamps_;
      n = static_cast<uint64_t>(end_ - p_);
    }
    data = p_;
    size = static_cast<size_t>(n);
    p_ += n;
    return true;
  }
  // The next field, which must be `field` with wire type 2.
  bool len_field(uint32_t want, const uint8_t*& data, size_t& size) {
    uint32_t field, wire;
    return tag(field, wire) && field == want && wire == 2 && bytes(data, size);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  int* clamps_;
};

// A Feature message: {oneof: 1 bytes_list, 2 float_list, 3 int64_list}, its list checked.
bool read_feature(const uint8_t* data, size_t size, FeatureView& out, int* clamps = nullptr);

// Where the strict reader stopped in a record it could not read: for messages.
struct Stop {
  size_t offset = 0;
  std::string_view feature;  // the key of the feature entry being read, if known
};

// An Example: {1: Features {1: entry {1: key, 2: Feature}}*}. Calls found(key, view) for every
// entry in order; false (with `stop` set) where the strict reader gives up. With clamp, lengths
// past the end are cut short, and the first entry cut short stops the reading: for messages
// about damaged bytes.
template <class Found>
bool read_example(std::string_view bytes, Found&& found, Stop& stop, int* clamps = nullptr) {
  const auto* base = reinterpret_cast<const uint8_t*>(bytes.data());
  WireReader r(base, bytes.size(), clamps);
  bool had_features = false;
  while (!r.done()) {
    const uint8_t* features;
    size_t features_size;
    if (had_features || !r.len_field(1, features, features_size)) {
      stop.offset = r.offset_from(base);
      return false;
    }
    had_features = true;
    WireReader entries(features, features_size, clamps);
    while (!entries.done()) {
      const int clamps_before = clamps ? *clamps : 0;
      const uint8_t* entry;
      size_t entry_size;
      if (!entries.len_field(1, entry, entry_size)) {
        stop.offset = entries.offset_from(base);
        return false;
      }
      WireReader e(entry, entry_size, clamps);
      std::string_view key;
      const uint8_t* value = nullptr;
      size_t value_size = 0;
      bool has_key = false, has_value = false;
      while (!e.done()) {
        uint32_t field, wire;
        const uint8_t* data;
        size_t size;
        if (!e.tag(field, wire) || wire != 2 || !e.bytes(data, size) || (field == 1 && has_key) ||
            (field == 2 && has_value) || field > 2) {
          stop = {e.offset_from(base), key};
          return false;
        }
        if (field == 1) {
          key = {reinterpret_cast<const char*>(data), size};
          has_key = true;
        } else {
          value = data;
          value_size = size;
          has_value = true;
        }
      }
      FeatureView view;
      if (has_value && !read_feature(value, value_size, view, clamps)) {
        stop = {static_cast<size_t>(value - base), key};
        return false;
      }
      if (clamps && *clamps > clamps_before) {
        stop = {static_cast<size_t>(entry - base), key};
        return false;
      }
      found(key, view);
    }
  }
  return true;
}

// Copies a view's values into `dst` (view.count elements of its kind: floats, int64s, bytes).
void copy_values(const FeatureView& v, uint8_t* dst);

}  // namespace kiln::io::wire

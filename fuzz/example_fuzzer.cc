// Fuzzes tf.Example parsing: Example::parse and io::parse_example over a batch of examples
// with a spec also taken from the input. Input:
//   byte 0: the number of spec entries (low 2 bits);
//   per entry: flags (bit 0 FixedLen, bits 1-2 dtype f32/i64/u8/i32, bit 3 a default value,
//     bit 4 a full-shape default), a name byte ('a' + b % 4; 255: empty), a rank byte (b % 4),
//     then one signed byte per dimension (127: 2^40);
//   then the serialized examples, separated by the 3 bytes ff fe fd.
// Checks that everything ends in results of the promised shapes or kiln::Error, and that
// Example's serialization is a fixed point after one parse. The error codes allowed:
//   Example::parse: kDataLoss (the bytes are not a tf.Example).
//   parse_example: kInvalidArgument (a bad spec, or examples that do not match it: a required
//     feature missing, the wrong kind of list, the wrong number of values); kDataLoss (a record
//     that is not a tf.Example), and only when Example::parse (protobuf) also refuses a record;
//     and a batch with such a record never parses.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_file.h"
#include "kiln/error.h"
#include "kiln/io/example.h"

namespace {

using namespace kiln;

constexpr std::string_view kSeparator = "\xff\xfe\xfd";

struct Reader {
  const uint8_t* data;
  size_t size, at = 0;
  uint8_t byte() { return at < size ? data[at++] : 0; }
};

io::FeatureSpec read_spec_entry(Reader& in) {
  const uint8_t flags = in.byte();
  const uint8_t name_byte = in.byte();
  const std::string name = name_byte == 255 ? "" : std::string(1, 'a' + name_byte % 4);
  const DType dtypes[] = {f32, i64, u8, i32};
  const DType dtype = dtypes[(flags >> 1) & 3];
  if ((flags & 1) == 0) return io::VarLen{name, dtype};
  io::FixedLen spec{name, dtype, {}, std::nullopt};
  const int rank = in.byte() % 4;
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    const int8_t d = static_cast<int8_t>(in.byte());
    spec.shape.push_back(d == 127 ? int64_t{1} << 40 : d);
    elements = d < 0 || d == 127 || elements < 0 ? -1 : elements * d;
  }
  // The spec is the program's, not the file's: a default makes the program ask for
  // batch x shape elements, so defaults go only with shapes that fit the fuzzer's memory.
  if ((flags & 8) && elements >= 0 && elements <= 4096) {
    if ((flags & 16) && elements <= 64) {
      spec.default_value = Tensor::from_vector(std::vector<float>(elements, 2.5f), spec.shape);
    } else {
      spec.default_value = Tensor::scalar<float>(1.5f);
    }
  }
  return spec;
}

void check_result(const std::map<std::string, Tensor>& result,
                  const std::vector<io::FeatureSpec>& spec, size_t batch) {
  for (const io::FeatureSpec& entry : spec) {
    if (const auto* f = std::get_if<io::FixedLen>(&entry)) {
      const Tensor& t = result.at(f->name);
      Shape expected = {static_cast<int64_t>(batch)};
      expected.insert(expected.end(), f->shape.begin(), f->shape.end());
      fuzz::check(t.dtype() == f->dtype && t.shape() == expected);
      // A shape whose element count overflows must have been refused, never half-made.
      uint64_t bytes = dtype_size(t.dtype());
      for (int64_t d : expected) fuzz::check(!__builtin_mul_overflow(bytes, d, &bytes));
      fuzz::check(t.nbytes() == bytes);
    } else {
      const auto& v = std::get<io::VarLen>(entry);
      const Tensor& values = result.at(v.name);
      const Tensor& lengths = result.at(io::lengths_key(v.name));
      fuzz::check(values.dtype() == v.dtype && values.rank() == 2 &&
                  values.dim(0) == static_cast<int64_t>(batch));
      fuzz::check(lengths.dtype() == i64 && lengths.shape() == Shape{static_cast<int64_t>(batch)});
      for (int64_t n : lengths.to_vector<int64_t>()) fuzz::check(n >= 0 && n <= values.dim(1));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  std::vector<io::FeatureSpec> spec;
  const int entries = in.byte() % 4;
  for (int i = 0; i < entries; ++i) spec.push_back(read_spec_entry(in));

  std::vector<std::string> examples;
  std::string_view rest(reinterpret_cast<const char*>(data) + in.at, size - std::min(size, in.at));
  while (!rest.empty()) {
    const size_t end = rest.find(kSeparator);
    examples.emplace_back(rest.substr(0, end));
    rest =
        end == std::string_view::npos ? std::string_view() : rest.substr(end + kSeparator.size());
  }

  bool any_unparsable = false;
  for (const std::string& bytes : examples) {
    try {
      const std::string once = io::Example::parse(bytes).serialize();
      fuzz::check(io::Example::parse(once).serialize() == once);
    } catch (const Error& e) {
      fuzz::note(e);
      fuzz::check(e.code() == ErrorCode::kDataLoss);
      any_unparsable = true;
    }
  }
  try {
    check_result(io::parse_example(examples, spec), spec, examples.size());
    fuzz::check(!any_unparsable);  // its strict reader accepts only what protobuf accepts
  } catch (const Error& e) {
    fuzz::note(e);
    fuzz::check(e.code() == ErrorCode::kInvalidArgument ||
                (e.code() == ErrorCode::kDataLoss && any_unparsable));
  }
  return 0;
}

// Fuzzes io::load_model and io::describe_saved_model. Input: [2-byte length][the SavedModel
// proto][2-byte length][the variables' CheckpointIndex proto][the variables' data file]. The
// harness writes <dir>/1/saved_model.pb and <dir>/1/variables/variables.index (each proto
// TFRecord-framed) and the data file under the name the index gives. Loading rebuilds the graph
// by calling each node's op, so the ops' shape functions see the file's attributes too.
// Checks: a model or a kiln::Error, never a crash; load_model gives the info
// describe_saved_model gives, or an error (always when describe_saved_model gives one); and a
// loaded model's signatures hold values of the types its info declares: each signature runs on
// inputs of its declared types (unknown dimensions 2), and every output has its declared dtype
// and a shape that fits the declared one. The error codes each call may give here (every file
// exists, so no kNotFound for a missing file):
//   describe_saved_model: kDataLoss (saved_model.pb or the variables' index is corrupt).
//   load_model: kDataLoss (any file corrupt, or the graph not what the ops rebuild), kNotFound
//     for an op this program does not register (checked against the registry), and
//     kInvalidArgument from an op refusing the file's attributes or input types (load_model
//     gives an op's own error).
//   running a signature: kInvalidArgument (an op refusing the concrete shapes, e.g. a reshape
//     they do not fit), kOutOfRange (an index out of range in the data, as in gather; or out of
//     memory), kNotFound (no CPU kernel for the file's dtype). Never kFailedPrecondition: a
//     signature that needs a placeholder it does not feed is refused at load.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>

#include "fuzz/fuzz_file.h"
#include "fuzz/fuzz_graph.h"
#include "kiln/error.h"
#include "kiln/io/saved_model.h"
#include "kiln/op_registry.h"
#include "src/core/type_switch.h"
#include "src/api/io/proto/checkpoint.pb.h"

namespace {

using namespace kiln;

constexpr int64_t kFedDim = 2;  // the size fed for an unknown dimension
// Signatures are run only when no value of the graph can exceed this many elements, with each
// unknown dimension taken as large as the largest input fed (a reshape may gather an input
// into one dimension), and when all of them together stay under 4 times as many.
constexpr uint64_t kMaxElements = uint64_t{1} << 24;

// The elements of `shape` with each unknown dimension taken as `unknown`, at most
// kMaxElements + 1.
uint64_t elements(const Shape& shape, uint64_t unknown) {
  return fuzz::capped_elements(shape, unknown, kMaxElements);
}

Shape fed_shape(const Shape& declared) {
  Shape out = declared;
  std::replace(out.begin(), out.end(), kUnknownDim, kFedDim);
  return out;
}

// A value of `type`'s dtype and fed shape holding 0 1 2 3 0 1 ... (bool: 0 1 0 1 ...): small,
// so index inputs are often in range.
Tensor input_for(const TensorType& type) {
  Tensor t = Tensor::empty(type.dtype, fed_shape(type.shape));
  if (t.nbytes() == 0) return t;
  visit_dtype(type.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* p = static_cast<T*>(t.raw_mutable_data());
    for (size_t i = 0; i < t.nbytes() / sizeof(T); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        p[i] = i % 2;
      } else {
        p[i] = T(static_cast<float>(i % 4));
      }
    }
  });
  return t;
}

// `got` is a shape the declared one allows: same rank, known dimensions equal.
bool fits(const Shape& declared, const Shape& got) {
  if (declared.size() != got.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] < 0 || (declared[i] != kUnknownDim && declared[i] != got[i])) return false;
  }
  return true;
}

// Whether running `model`'s signatures on fed inputs stays within the fuzzer's memory and time.
bool small_enough(const io::LoadedModel& model) {
  uint64_t largest_input = kFedDim;
  for (const auto& [name, sig] : model.signatures()) {
    for (const auto& [input, type] : sig.inputs) {
      largest_input = std::max(largest_input, elements(fed_shape(type.shape), 0));
    }
  }
  const Graph& g = model.graph();
  uint64_t total = 0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    for (const TensorType& t : g.node(id).outputs) {
      const uint64_t n = elements(t.shape, largest_input);
      if (n > kMaxElements) return false;
      total += n;
    }
  }
  return total <= 4 * kMaxElements;
}

void check_runs(const io::LoadedModel& model) {
  for (const auto& [name, sig] : model.signatures()) {
    std::map<std::string, Tensor> inputs;
    for (const auto& [input, type] : sig.inputs) inputs[input] = input_for(type);
    std::map<std::string, Tensor> outputs;
    try {
      outputs = model.run(name, inputs);
    } catch (const Error& e) {
      fuzz::note(e);
      fuzz::check(fuzz::one_of(
          e.code(), {ErrorCode::kInvalidArgument, ErrorCode::kOutOfRange, ErrorCode::kNotFound}));
      continue;
    }
    static const bool verbose = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "ran signature '%s'\n", name.c_str());
    fuzz::check(outputs.size() == sig.outputs.size());
    for (const auto& [output, type] : sig.outputs) {
      auto it = outputs.find(output);
      fuzz::check(it != outputs.end());
      const Tensor& value = it->second;
      fuzz::check(value.defined() && !value.is_symbolic() && value.dtype() == type.dtype &&
                  fits(type.shape, value.shape()));
    }
  }
}

bool same_info(const io::SavedModelInfo& a, const io::SavedModelInfo& b) {
  auto same_signature = [](const io::SignatureInfo& x, const io::SignatureInfo& y) {
    return x.inputs == y.inputs && x.outputs == y.outputs;
  };
  auto same_variable = [](const io::SavedModelInfo::Variable& x,
                          const io::SavedModelInfo::Variable& y) {
    return x.name == y.name && x.dtype == y.dtype && x.shape == y.shape;
  };
  return a.path == b.path && a.version == b.version && a.model_name == b.model_name &&
         a.kiln_version == b.kiln_version && a.num_nodes == b.num_nodes &&
         a.op_counts == b.op_counts && a.num_parameters == b.num_parameters &&
         std::equal(a.signatures.begin(), a.signatures.end(), b.signatures.begin(),
                    b.signatures.end(),
                    [&](const auto& x, const auto& y) {
                      return x.first == y.first && same_signature(x.second, y.second);
                    }) &&
         std::equal(a.variables.begin(), a.variables.end(), b.variables.begin(), b.variables.end(),
                    same_variable);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::ScratchDir scratch;
  fuzz::Parts parts(data, size);
  const std::string_view model = parts.part(), index = parts.part(), data_file = parts.rest();
  const std::string& dir = scratch.reset();
  scratch.write("1/saved_model.pb", fuzz::tfrecord(model));
  scratch.write("1/variables/variables.index", fuzz::tfrecord(index));
  proto::CheckpointIndex parsed;
  std::string data_name = "variables.data";
  if (parsed.ParseFromArray(index.data(), static_cast<int>(index.size())) &&
      fuzz::safe_file_name(parsed.data_file()) && parsed.data_file() != "variables.index") {
    data_name = parsed.data_file();
  }
  scratch.write("1/variables/" + data_name, data_file);

  std::optional<io::SavedModelInfo> info;
  try {
    info = io::describe_saved_model(dir);
    fuzz::check(info->version == 1);
  } catch (const Error& e) {
    fuzz::note(e);
    fuzz::check(e.code() == ErrorCode::kDataLoss);
  }
  std::optional<io::LoadedModel> loaded;
  try {
    loaded = io::load_model(dir);
  } catch (const Error& e) {
    fuzz::note(e);
    if (e.code() == ErrorCode::kNotFound && info) {
      const auto& ops = info->op_counts;
      fuzz::check(std::any_of(ops.begin(), ops.end(), [](const auto& op) {
        return op.first != "placeholder" && op.first != "constant" &&
               !OpRegistry::global().contains(op.first);
      }));
    } else {
      fuzz::check(fuzz::one_of(
          e.code(), {ErrorCode::kDataLoss, ErrorCode::kInvalidArgument, ErrorCode::kNotFound}));
    }
    return 0;
  }
  // What describe refuses, load refuses too (though it may find another fault first).
  fuzz::check(info && same_info(loaded->info(), *info));
  if (small_enough(*loaded)) check_runs(*loaded);
  return 0;
}

// The op registry is the compiler's source of truth (kiln/elemental.h): every op claiming
// fusion has an elemental form or a fold, every form compiles for some dtype and gives its
// reference kernel's bits on every dtype it compiles for, and every primitive is used.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "compiler/cpu/fused_kernel.h"
#include "compiler/cpu/fusion_target.h"
#include "compiler/executable.h"
#include "compiler/generator.h"
#include "kiln/kiln.h"
#include "runtime/execute.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

// The kCodegen ops the compiler does not emit yet, each with the reason. An op leaves this table
// when it gets an elemental form or a fold; a new kCodegen op without one must be added here.
const std::map<std::string, std::string>& not_emitted_yet() {
  static const std::map<std::string, std::string> kTable = {
      {"reduce_any", "the emitter folds numbers, not bools"},
      {"reduce_all", "the emitter folds numbers, not bools"},
      {"argmax", "the emitter folds values, not (value, index) pairs"},
      {"argmin", "the emitter folds values, not (value, index) pairs"},
      {"reduce_window_max", "windowed reductions run their kernels"},
      {"reduce_window_sum", "windowed reductions run their kernels"},
      {"iota", "no primitive reads the loop index yet"},
      {"stop_gradient", "its kernel hands back its input: there is nothing to compute"},
      {"placeholder", "a graph input"},
      {"constant", "a graph input, computed once at compile time"},
  };
  return kTable;
}

// Why `def` breaks the registry's promise about fusion, or "".
std::string claim_problem(const OpDef& def) {
  const bool has_form = static_cast<bool>(def.elemental) || def.reduction.has_value() ||
                        static_cast<bool>(def.index_map) || static_cast<bool>(def.pieces) ||
                        is_generator_op(def.name);  // compiler/generator.h
  const bool listed = not_emitted_yet().count(def.name) > 0;
  if (def.kind == OpKind::kCodegen && !has_form && !listed)
    return def.name + " (" + def.source +
           ") is kCodegen but has no elemental form or fold, and is not listed as pending";
  if (has_form && listed) return def.name + " has a form now: take it out of not_emitted_yet()";
  if (def.kind != OpKind::kCodegen && has_form)
    return def.name + " has an elemental form but is not kCodegen";
  return "";
}

TEST(ElementalCensus, AClaimWithoutAFormIsReported) {
  OpDef def;
  def.name = "claims_fusion";
  def.kind = OpKind::kCodegen;
  EXPECT_THAT(claim_problem(def), HasSubstr("claims_fusion"));
  def.elemental = [](ElementalBuilder& b, const std::vector<int>& x, const Attrs&) {
    return b.apply(Prim::kNeg, x);
  };
  EXPECT_EQ(claim_problem(def), "");
}

// Every registered op, less those whose registration failed (tests/core/errors_test.cc
// registers one twice on purpose; using it throws that error).
std::vector<const OpDef*> registered_ops() {
  std::vector<const OpDef*> defs;
  for (const std::string& name : OpRegistry::global().names()) {
    try {
      defs.push_back(&OpRegistry::global().find(name));
    } catch (const Error&) {
    }
  }
  return defs;
}

TEST(ElementalCensus, EveryCodegenOpHasAnElementalFormOrAFoldOrIsListed) {
  std::set<std::string> registered;
  for (const OpDef* def : registered_ops()) {
    EXPECT_EQ(claim_problem(*def), "");
    registered.insert(def->name);
  }
  for (const auto& [op, why] : not_emitted_yet())
    EXPECT_TRUE(registered.count(op)) << op << " is listed but not registered";
}

// ---- agreement with the reference kernels ----

constexpr int64_t kN = 67;  // vector bodies and a tail

template <class T>
std::vector<T> float_values(std::mt19937& rng) {
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> v = {T(0),   T(-0.0), T(1),   T(-1),   inf,    -inf,
                      std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::denorm_min(),
                      T(1e30), T(-1e30), T(0.5), T(2.5),  T(-2.5), T(3),   T(100)};
  std::uniform_real_distribution<double> d(-4, 4);
  while (static_cast<int64_t>(v.size()) < kN) v.push_back(static_cast<T>(d(rng)));
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

template <class T>
std::vector<T> int_values(std::mt19937& rng) {
  std::vector<T> v;
  for (int x : {0, 1, -1, 2, -2, 7}) v.push_back(static_cast<T>(x));
  v.push_back(std::numeric_limits<T>::min());
  v.push_back(std::numeric_limits<T>::max());
  std::uniform_int_distribution<int> d(-100, 100);
  while (static_cast<int64_t>(v.size()) < kN) v.push_back(static_cast<T>(d(rng)));
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

Tensor random_tensor(DType dtype, std::mt19937& rng) {
  auto from = [&](const auto& values) {
    using T = typename std::decay_t<decltype(values)>::value_type;
    Tensor t = Tensor::empty(dtype, {kN});
    std::memcpy(t.raw_mutable_data(), values.data(), sizeof(T) * kN);
    return t;
  };
  switch (dtype) {
    case DType::f32: return from(float_values<float>(rng));
    case DType::f64: return from(float_values<double>(rng));
    case DType::bf16:
    case DType::f16: {  // the f32 values (subnormal, huge, NaN ...) rounded to the type
      Tensor t = Tensor::from_vector(float_values<float>(rng), {kN});
      Tensor r = convert(t, dtype);
      if (dtype == DType::f16) {  // and f16's own subnormals and largest finite value
        auto* bits = static_cast<uint16_t*>(r.raw_mutable_data());
        bits[0] = 0x0001;
        bits[1] = 0x83ff;
        bits[2] = 0x7bff;
      }
      return r;
    }
    case DType::i32: return from(int_values<int32_t>(rng));
    case DType::i64: return from(int_values<int64_t>(rng));
    case DType::u8: return from(int_values<uint8_t>(rng));
    case DType::i8: return from(int_values<int8_t>(rng));
    case DType::bool_: {
      std::vector<uint8_t> b(kN);
      for (auto& x : b) x = rng() & 1;
      return from(b);
    }
    default: throw Error(ErrorCode::kInvalidArgument, "random_tensor: unsupported dtype");
  }
}

// Element i of t as a double, for messages and the NaN check.
double item_as_double(const Tensor& t, int64_t i) {
  const void* p = static_cast<const unsigned char*>(t.raw_data()) + i * dtype_size(t.dtype());
  switch (t.dtype()) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::f64: return *static_cast<const double*>(p);
    case DType::i32: return *static_cast<const int32_t*>(p);
    case DType::i64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::i8: return *static_cast<const int8_t*>(p);
    case DType::bf16: return static_cast<float>(*static_cast<const bfloat16*>(p));
    case DType::f16: return static_cast<float>(*static_cast<const half*>(p));
    default: return *static_cast<const uint8_t*>(p);  // u8, bool
  }
}

// Element i of a and b hold the same bits, or are both NaN (payloads may differ).
std::string first_difference(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return "types differ: " + TensorType{a.dtype(), a.shape()}.str() + " vs " +
           TensorType{b.dtype(), b.shape()}.str();
  const size_t w = dtype_size(a.dtype());
  auto* pa = static_cast<const unsigned char*>(a.raw_data());
  auto* pb = static_cast<const unsigned char*>(b.raw_data());
  for (int64_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(pa + i * w, pb + i * w, w) == 0) continue;
    double x = item_as_double(a, i), y = item_as_double(b, i);
    if (std::isnan(x) && std::isnan(y)) continue;
    return "element " + std::to_string(i) + ": reference " + std::to_string(x) + ", compiled " +
           std::to_string(y);
  }
  return "";
}

const std::vector<DType> kDtypes = {f32, f64, i32, i64, bool_, u8, i8, bf16, f16};

struct Trial {
  std::vector<DType> in;
  Attrs attrs;
};

// The input dtypes (and attributes) to try an op on: every dtype for each input alike; select
// takes a bool predicate first; convert goes from every dtype to every dtype.
std::vector<Trial> trials(const OpDef& def) {
  std::vector<Trial> out;
  const size_t arity = def.inputs.size();
  for (DType t : kDtypes) {
    if (def.name == "convert") {
      for (DType to : kDtypes) out.push_back({{t}, Attrs{{"dtype", to}}});
      continue;
    }
    std::vector<DType> in(arity, t);
    if (def.name == "select") in[0] = bool_;
    out.push_back({in, {}});
  }
  return out;
}

TEST(ElementalCensus, EveryElementalFormMatchesItsReferenceKernelBitForBit) {
  std::mt19937 rng(1234);
  for (const OpDef* op : registered_ops()) {
    const OpDef& def = *op;
    const std::string& name = def.name;
    if (!def.elemental) continue;
    int compiled = 0;
    for (const Trial& trial : trials(def)) {
      std::vector<Tensor> inputs;
      std::vector<TensorType> in_types;
      for (DType t : trial.in) {
        inputs.push_back(random_tensor(t, rng));
        in_types.push_back({t, {kN}});
      }
      std::vector<Tensor> want;
      try {
        runtime::infer_types(def, name, in_types, trial.attrs);
        want = runtime::run_kernel(def, name, inputs, trial.attrs);
      } catch (const Error&) {
        continue;  // the op does not take these dtypes at all
      }
      FusedSubgraph sg;
      sg.name = "census_" + name;
      std::vector<int> args;
      for (const TensorType& t : in_types) args.push_back(sg.add_input(t.dtype, t.shape));
      SubgraphBuilder b(sg, cpu::fusion_target());
      int v = b.apply_op(def, args, trial.attrs);
      if (v == ElementalBuilder::kRefused) continue;  // the emitter does not compute it
      sg.add_output(v);
      std::string where = name + " on " + dtype_name(trial.in[0]) +
                          (trial.attrs.has("dtype")
                               ? std::string(" to ") + dtype_name(trial.attrs.get_dtype("dtype"))
                               : "");
      std::vector<Tensor> got;
      try {
        got = cpu::compile_elementwise(sg).run(inputs);
      } catch (const Error& e) {
        ADD_FAILURE() << where << ": the form builds but does not compile: " << e.what();
        continue;
      }
      ++compiled;
      EXPECT_EQ(first_difference(want.at(0), got.at(0)), "") << where;
    }
    EXPECT_GT(compiled, 0) << name << " has an elemental form that compiles for no dtype";
  }
}

// Records the primitives a form applies, on f32 values.
class Recorder final : public ElementalBuilder {
 public:
  int apply(Prim prim, const std::vector<int>&, DType) override {
    used.insert(prim);
    return next_++;
  }
  DType dtype(int) const override { return f32; }
  const std::string& refusal() const override { return none_; }
  std::set<Prim> used;

 private:
  int next_ = 16;
  std::string none_;
};

TEST(ElementalCensus, EveryPrimitiveIsUsedByARegisteredOp) {
  Recorder r;
  for (const OpDef* op : registered_ops()) {
    const OpDef& def = *op;
    if (!def.elemental) continue;
    std::vector<int> args(def.inputs.size());
    for (size_t i = 0; i < args.size(); ++i) args[i] = static_cast<int>(i);
    Attrs attrs = def.name == "convert" ? Attrs{{"dtype", f64}} : Attrs{};
    def.elemental(r, args, attrs);
  }
  for (Prim p : all_prims()) EXPECT_TRUE(r.used.count(p)) << prim_name(p) << " is never used";
}

TEST(ElementalCensus, PrimitiveNamesRoundTrip) {
  for (Prim p : all_prims()) EXPECT_EQ(prim_from_name(prim_name(p)), p);
  EXPECT_EQ(prim_arity(Prim::kSelect), 3);
  EXPECT_FALSE(prim_from_name("dot").has_value());
}

// The worked example of docs/architecture.md: tan is one registration, one primitive and one
// emitter case, and fuses with its neighbours.
TEST(ElementalCensus, TanFusesAndMatchesEager) {
  Graph g{"tan"};
  Tensor x = g.placeholder(f32, {kN}, "x");
  Tensor y = tan(x * 0.5) + 1.0;
  std::mt19937 rng(7);
  Tensor xv = random_tensor(f32, rng);
  Executable e = compile(g, {y}, {{x, xv}});
  EXPECT_EQ(e.num_fused_thunks(), 1) << e.fusion_log();
  EXPECT_EQ(first_difference(tan(xv * 0.5) + 1.0, e.run({{x, xv}})[0]), "");
}

}  // namespace
}  // namespace kiln::compiler

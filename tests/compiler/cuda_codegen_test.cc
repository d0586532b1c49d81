// The CUDA code generator without a GPU (compiler/cuda/ptx.h): ptxas accepts what it emits for
// every primitive and dtype, every input layout and reduction; its arithmetic is the CPU's (no
// contraction, libdevice inlined); and its grid mapping (compiler/llvm_ir/grid_kernel.h), run
// on the host with the block and thread ids from loops, computes every item once, with the
// bits of the CPU's kernel, and matches the interpreter on the random graphs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "compiler/cpu/fused_kernel.h"
#include "compiler/cuda/ptx.h"
#include "compiler/dump.h"
#include "kiln/kiln.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/subprocess.h"
#include "runtime/cuda/driver.h"
#include "tests/testing/ptxas.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const DType kComputeDtypes[] = {f32, f64, bf16, f16, i32, i64, bool_};

// One subgraph per primitive and operand dtype the typing rules allow (converts: to every
// storage dtype, u8 and i8 included), each reading a broadcast row and writing one output.
std::vector<FusedSubgraph> every_primitive() {
  std::vector<FusedSubgraph> out;
  for (Prim p : all_prims()) {
    for (DType t : kComputeDtypes) {
      std::vector<DType> tos = {f32};
      if (p == Prim::kConvert) tos = {f32, f64, bf16, f16, i32, i64, bool_, u8, i8};
      for (DType to : tos) {
        FusedSubgraph sg;
        sg.name = std::string(prim_name(p)) + "_" + dtype_name(t) + "_" + dtype_name(to);
        std::vector<int> args;
        for (int i = 0; i < prim_arity(p); ++i) {
          const bool cond = p == Prim::kSelect && i == 0;
          args.push_back(sg.add_input(cond ? bool_ : t, i == 1 ? Shape{1, 33} : Shape{5, 33}));
        }
        try {
          sg.add_output(sg.add(p, args, to));
          sg.validate(cuda::fusion_target());
        } catch (const Error&) {
          continue;  // the typing rules refuse these dtypes (logic on floats, sin on integers),
                     // or the loops do (a convert that would round twice)
        }
        out.push_back(std::move(sg));
      }
    }
  }
  return out;
}

// Reads through a transpose and a slice, a concatenate's pieces, and reductions: rows, columns,
// a middle axis, several outputs, 16-bit and integer folds.
std::vector<FusedSubgraph> layouts_and_reductions() {
  std::vector<FusedSubgraph> out;
  {
    FusedSubgraph sg;
    sg.name = "transpose_read";
    int a = sg.add_mapped_input(f32, {6, 4}, StridedView{{1, 6}, 0}, {4, 6});
    int b = sg.add_input(f32, {4});
    sg.add_output(sg.add(Prim::kMul, {a, b}));
    out.push_back(std::move(sg));
  }
  {
    FusedSubgraph sg;
    sg.name = "concat_pieces";
    int fill = sg.add_input(f32, {});
    int a = sg.add_piece_input(f32, {3, 10}, Piece{{0, 0}, {3, 4}, {1, 1}}, {3, 4}, fill);
    int b = sg.add_piece_input(f32, {3, 10}, Piece{{0, 4}, {3, 10}, {1, 1}}, {3, 6}, a);
    sg.add_output(sg.add(Prim::kExp, {b}));
    out.push_back(std::move(sg));
  }
  for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kProd, ReduceKind::kMax, ReduceKind::kMin}) {
    for (DType t : {f32, f64, bf16, f16, i32, i64}) {
      if (kind != ReduceKind::kSum && t != f32 && t != bf16 && t != i64) continue;
      for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {0}, {1, 2}}) {
        FusedSubgraph sg;
        sg.name = std::string(reduce_kind_name(kind)) + "_" + dtype_name(t) + "_" +
                  std::to_string(axes[0]) + std::to_string(axes.size());
        int x = sg.add_input(t, {3, 7, 5});
        int y = sg.add_input(t, {5});
        int s = sg.add(Prim::kAdd, {x, y});
        sg.add_output(sg.add_reduce(kind, s, axes));
        out.push_back(std::move(sg));
      }
    }
  }
  {
    FusedSubgraph sg;  // an embedding lookup, scaled: rows of a [3, 6] table (indices -3..3)
    sg.name = "gather_rows";
    int idx = sg.add_mapped_input(i32, {5, 6}, StridedView{{1, 0}, 0}, {5});
    int x = sg.add_gathered_input(f32, {5, 6}, StridedView{{0, 1}, 0}, {3, 6},
                                  {.indices = idx, .stride = 6, .dim = 3});
    sg.add_output(sg.add(Prim::kMul, {x, sg.add_input(f32, {6})}));
    out.push_back(std::move(sg));
  }
  {
    FusedSubgraph sg;  // bf16 gathered along x's last axis by 2-d i64 indices, summed per row
    sg.name = "gather_last_axis_sum";
    int idx = sg.add_mapped_input(i64, {4, 2, 5}, StridedView{{0, 5, 1}, 0}, {2, 5});
    int x = sg.add_gathered_input(bf16, {4, 2, 5}, StridedView{{3, 0, 0}, 0}, {4, 3},
                                  {.indices = idx, .stride = 1, .dim = 3});
    sg.add_output(sg.add_reduce(ReduceKind::kSum, x, {2}));
    out.push_back(std::move(sg));
  }
  {
    FusedSubgraph sg;  // softmax's pieces: the shifted values and their row sum, in one kernel
    sg.name = "multi_output";
    int x = sg.add_input(f32, {4, 9});
    int e = sg.add(Prim::kExp, {x});
    sg.add_output(e);
    sg.add_output(sg.add_reduce(ReduceKind::kSum, e, {1}));
    sg.add_output(sg.add_reduce(ReduceKind::kMax, x, {1}));
    out.push_back(std::move(sg));
  }
  return out;
}

cuda::PtxModule compile_or_fail(const std::vector<FusedSubgraph>& sgs) {
  try {
    return cuda::compile_ptx(sgs);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
    return {};
  }
}

void expect_ptxas_accepts(const std::string& ptx) {
  const std::string ptxas = testing_util::ptxas_path();
  if (ptxas.empty()) GTEST_SKIP() << "no ptxas (CUDA toolkit) on this machine: PTX not assembled";
  EXPECT_EQ(testing_util::ptxas_errors(ptxas, ptx), "");
}

TEST(CudaCodegen, PtxasAcceptsEveryPrimitiveAndDtype) {
  if (cuda::find_libdevice().empty())
    GTEST_SKIP() << "no libdevice.10.bc (CUDA toolkit) on this machine: the transcendental "
                    "functions cannot be linked";
  std::vector<FusedSubgraph> sgs = every_primitive();
  ASSERT_GT(sgs.size(), 150u);
  cuda::PtxModule m = compile_or_fail(sgs);
  ASSERT_EQ(m.kernels.size(), sgs.size());
  for (size_t i = 0; i < sgs.size(); ++i) {
    EXPECT_THAT(m.ptx, HasSubstr(".entry " + m.kernels[i].entry + "(")) << sgs[i].name;
    EXPECT_EQ(m.kernels[i].items, 5 * 33);
    EXPECT_EQ(m.kernels[i].num_inputs, static_cast<int>(sgs[i].inputs.size()));
  }
  EXPECT_THAT(m.ptx, HasSubstr(".target sm_90"));
  // libdevice's functions are inlined: nothing is left for the driver's linker.
  EXPECT_THAT(m.ptx, Not(HasSubstr(".extern .func")));
  expect_ptxas_accepts(m.ptx);
}

TEST(CudaCodegen, PtxasAcceptsLayoutsAndReductions) {
  std::vector<FusedSubgraph> sgs = layouts_and_reductions();
  cuda::PtxModule m = compile_or_fail(sgs);
  ASSERT_EQ(m.kernels.size(), sgs.size());
  EXPECT_EQ(m.kernels.back().items, 4);  // a reduction's items are its rows
  EXPECT_EQ(m.kernels.back().num_outputs, 3);
  // No kernel keeps anything in local memory: the pointer arrays, a row's accumulators and a
  // column's (one column a thread) live in registers.
  EXPECT_THAT(m.ptx, Not(HasSubstr("__local_depot")));
  expect_ptxas_accepts(m.ptx);
}

// The device's scatter_add loop in each dtype it adds in (it reads the row plan, not the
// indices, whatever their dtype).
TEST(CudaCodegen, PtxasAcceptsTheScatterAddLoop) {
  for (DType t : {f32, f64, i32, i64}) {
    SCOPED_TRACE(dtype_name(t));
    cuda::PtxModule m;
    try {
      m = cuda::compile_scatter_add_ptx({.dtype = t, .outer = 3, .dim = 50, .inner = 16, .count = 7});
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    ASSERT_EQ(m.kernels.size(), 1u);
    EXPECT_EQ(m.kernels[0].items, 3 * 7 * 16);  // at most 7 rows named
    EXPECT_THAT(m.ptx, HasSubstr(".entry " + m.kernels[0].entry + "("));
    EXPECT_THAT(m.ptx, Not(HasSubstr("__local_depot")));
    expect_ptxas_accepts(m.ptx);
  }
  EXPECT_THROW(cuda::compile_scatter_add_ptx({.dtype = bf16, .dim = 2, .count = 1}), Error);
}

// The CPU's arithmetic: a*b+c stays a rounded multiply and a rounded add (ptxas does not fuse
// .rn operations), division and square root are IEEE.
TEST(CudaCodegen, KeepsTheCpusRounding) {
  FusedSubgraph sg;
  int a = sg.add_input(f32, {64});
  int b = sg.add_input(f32, {64});
  int c = sg.add(Prim::kAdd, {sg.add(Prim::kMul, {a, b}), a});
  sg.add_output(sg.add(Prim::kDiv, {sg.add(Prim::kSqrt, {c}), b}));
  cuda::PtxModule m = compile_or_fail({sg});
  EXPECT_THAT(m.ptx, HasSubstr("mul.rn.f32"));
  EXPECT_THAT(m.ptx, HasSubstr("add.rn.f32"));
  EXPECT_THAT(m.ptx, HasSubstr("sqrt.rn.f32"));
  EXPECT_THAT(m.ptx, HasSubstr("div.rn.f32"));
  EXPECT_THAT(m.ptx, Not(HasSubstr("fma.rn.f32")));
  EXPECT_THAT(m.ptx, Not(HasSubstr(".ftz")));
  expect_ptxas_accepts(m.ptx);
}

// A floating remainder is libdevice's fmod (exact, with fmod's sign of zero), not NVPTX's
// lowering of frem (x - trunc(x / y) * y); the dumped IR shows the call.
TEST(CudaCodegen, FloatRemainderIsFmod) {
  if (cuda::find_libdevice().empty()) GTEST_SKIP() << "no libdevice.10.bc on this machine";
  const std::string dir = ::testing::TempDir() + "/kiln_rem_dump_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (DType t : {f32, f64}) {
    FusedSubgraph sg;
    sg.name = std::string("rem_") + dtype_name(t);
    sg.add_output(sg.add(Prim::kRem, {sg.add_input(t, {8}), sg.add_input(t, {8})}));
    {
      DumpScope scope(dir);
      cuda::compile_ptx({sg}, {.sm = 90, .libdevice = "", .cache_dir = ""});
    }
    std::string ll;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().filename().string().rfind(sg.name, 0) == 0 && e.path().extension() == ".ll" &&
          e.path().string().find(".opt.") == std::string::npos) {
        std::ifstream f(e.path());
        ll.assign(std::istreambuf_iterator<char>(f), {});
      }
    EXPECT_THAT(ll, HasSubstr(t == f32 ? "@__nv_fmodf" : "@__nv_fmod")) << sg.name;
    EXPECT_THAT(ll, Not(HasSubstr(" frem "))) << sg.name;
  }
  std::filesystem::remove_all(dir);
}

// Without libdevice only the kernels that call a transcendental function fail to compile.
TEST(CudaCodegen, NeedsLibdeviceOnlyForTranscendentals) {
  FusedSubgraph sg;
  sg.add_output(sg.add(Prim::kExp, {sg.add_input(f32, {8})}));  // f32 exp is inline IR
  EXPECT_NO_THROW(cuda::compile_ptx({sg}, {.sm = 90, .libdevice = "/nonexistent"}));
}

// dot's attributes contracting lhs axis `lc` with rhs axis `rc`, no batch axes.
Attrs dot_attrs(int64_t lc, int64_t rc) {
  return Attrs{{"lhs_contract", std::vector<int64_t>{lc}},
               {"rhs_contract", std::vector<int64_t>{rc}},
               {"lhs_batch", std::vector<int64_t>{}},
               {"rhs_batch", std::vector<int64_t>{}}};
}

TEST(CudaCodegen, Errors) {
  FusedSubgraph sg;
  sg.name = "sin_kernel";
  sg.add_output(sg.add(Prim::kSin, {sg.add_input(f32, {8})}));
  try {
    cuda::compile_ptx({sg}, {.sm = 90, .libdevice = "/nonexistent/libdevice.10.bc"});
    ADD_FAILURE() << "no error without libdevice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_THAT(e.what(), HasSubstr("sin_kernel"));
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/libdevice.10.bc"));
  }
  try {
    cuda::compile_ptx({sg}, {.sm = 100});
    ADD_FAILURE() << "no error for sm_100";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("sm_100"));
  }
  // What the target refuses, compile_ptx refuses: reduced axes with a kept one between them.
  FusedSubgraph split;
  split.name = "split_axes";
  int x = split.add_input(f32, {3, 4, 5});
  split.add_output(split.add_reduce(ReduceKind::kSum, x, {0, 2}));
  try {
    cuda::compile_ptx({split});
    ADD_FAILURE() << "no error for non-adjacent reduced axes";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not adjacent"));
  }
  // Fused dots with cuBLASLt's bias epilogue (relu stays a loop: NaN); no fused convolution or
  // pool.
  const FusionTarget& target = cuda::fusion_target();
  EXPECT_TRUE(target.epilogue_dtype(f32));
  EXPECT_TRUE(target.epilogue_dtype(bf16));
  EXPECT_FALSE(target.epilogue_dtype(f64));
  EXPECT_FALSE(target.epilogue_activation("dot", Activation::kRelu));
  EXPECT_FALSE(target.epilogue_activation("dot", Activation::kTanh));
  EXPECT_FALSE(target.epilogue_activation("convolution", Activation::kRelu));
  EXPECT_THAT(target.epilogue_bias_refusal("convolution", {f32, {8}}, {f32, {2, 4, 4, 8}}),
              HasSubstr("convolutions take no epilogue"));
  EXPECT_EQ(target.epilogue_bias_refusal("dot", {f32, {1, 8}}, {f32, {4, 8}}), "");
  EXPECT_THAT(target.epilogue_bias_refusal("dot", {f32, {4, 1}}, {f32, {4, 8}}),
              HasSubstr("a bias of 8 elements"));
  EXPECT_EQ(target.fused_dot_layout_refusal({kUnknownDim, 8}, {8, 4}, dot_attrs(1, 0)), "")
      << "an unknown batch dimension is no refusal";
  EXPECT_THAT(target.fused_dot_layout_refusal({2, 3, 8}, {8, 4}, dot_attrs(2, 0)),
              HasSubstr("not matrices"));
  EXPECT_FALSE(target.conv_pool_dtype(f32));
  EXPECT_TRUE(cuda::fusion_target().compute_dtype(bf16));
  EXPECT_TRUE(cuda::fusion_target().storage_dtype(u8));
}

// The on-disk cache: a module compiled once is read back with the same PTX; another shape is
// another entry; a damaged or foreign file is a miss, recompiled and rewritten.
TEST(CudaCodegen, PtxCacheOnDisk) {
  const std::string dir = ::testing::TempDir() + "/kiln_ptx_cache_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  auto chain = [](int64_t n) {
    FusedSubgraph sg;
    sg.name = "chain";
    int x = sg.add_input(f32, {n});
    sg.add_output(sg.add(Prim::kMul, {sg.add(Prim::kAbs, {x}), x}));
    return sg;
  };
  cuda::PtxOptions options;
  options.cache_dir = dir;
  cuda::PtxModule first = cuda::compile_ptx({chain(100)}, options);
  EXPECT_FALSE(first.from_cache);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);  // no temporary left behind
  EXPECT_EQ(files[0].extension(), ".ptx");

  cuda::PtxModule again = cuda::compile_ptx({chain(100)}, options);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.ptx, first.ptx);
  ASSERT_EQ(again.kernels.size(), 1u);
  EXPECT_EQ(again.kernels[0].items, 100);
  EXPECT_EQ(again.kernels[0].inputs[0].str(), "f32[100]");

  // The item count is baked into the code: another size is another module.
  cuda::PtxModule other = cuda::compile_ptx({chain(101)}, options);
  EXPECT_FALSE(other.from_cache);
  EXPECT_NE(other.ptx, first.ptx);

  // A damaged file is a miss, and the rewrite repairs it: cut in the middle, cut at a line's end
  // (what looks like whole PTX), one byte changed.
  const std::string text = [&] {
    std::ifstream f(files[0], std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  std::string flipped = text;
  flipped[text.size() - 4] ^= 1;
  for (const std::string& damaged :
       {text.substr(0, text.size() / 2), text.substr(0, text.rfind('\n', text.size() - 2) + 1),
        flipped}) {
    SCOPED_TRACE(damaged.size());
    std::ofstream(files[0], std::ios::binary | std::ios::trunc) << damaged;
    cuda::PtxModule repaired = cuda::compile_ptx({chain(100)}, options);
    EXPECT_FALSE(repaired.from_cache);
    EXPECT_EQ(repaired.ptx, first.ptx);
    EXPECT_TRUE(cuda::compile_ptx({chain(100)}, options).from_cache);
  }

  // Another key in the file (a hash collision) is a miss too.
  std::string foreign = text;
  foreign.replace(foreign.find('\n') + 1, 9, "kiln-ptx 9");
  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << foreign;
  EXPECT_FALSE(cuda::compile_ptx({chain(100)}, options).from_cache);

  // No directory, no cache; an unwritable one is no cache either, and no error.
  options.cache_dir = "";
  EXPECT_FALSE(cuda::compile_ptx({chain(100)}, options).from_cache);
  options.cache_dir = "/proc/kiln_no_such_dir";
  EXPECT_FALSE(cuda::compile_ptx({chain(100)}, options).from_cache);
  EXPECT_FALSE(cuda::compile_ptx({chain(100)}, options).from_cache);
  std::filesystem::remove_all(dir);
}

TEST(CudaCodegen, LaunchDims) {
  EXPECT_EQ(cuda::launch_dims(0).blocks, 1);
  EXPECT_EQ(cuda::launch_dims(256).blocks, 1);
  EXPECT_EQ(cuda::launch_dims(257).blocks, 2);
  EXPECT_EQ(cuda::launch_dims(int64_t{1} << 30).blocks, 132 * 16);
  EXPECT_EQ(cuda::launch_dims(1000).threads, 256);
}

// ---- the grid mapping, on the host ----

Tensor random_values(DType t, const Shape& s, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<double> v(num_elements(s));
  for (double& x : v) x = t == bool_ ? (d(gen) > 0) : d(gen) + (is_floating(t) ? 0.25 * d(gen) : 0);
  return Tensor::from_vector(v, s).to(t);
}

std::vector<Tensor> inputs_for(const FusedSubgraph& sg, uint32_t seed) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < sg.inputs.size(); ++i)
    in.push_back(random_values(sg.inputs[i].dtype, sg.inputs[i].buffer_shape(),
                               seed + 31 * static_cast<uint32_t>(i)));
  return in;
}

using testing::bitwise_equal;

// The same bits, but any NaN for a NaN: x86's arithmetic makes a negative NaN (sqrt(-1)), a
// GPU's the canonical positive one, and their payloads mean nothing to Kiln.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (!is_floating(a.dtype())) return bitwise_equal(a, b);
  const size_t size = dtype_size(a.dtype());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  const auto* p = static_cast<const unsigned char*>(a.raw_data());
  const auto* q = static_cast<const unsigned char*>(b.raw_data());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (std::memcmp(p + i * size, q + i * size, size) != 0) return false;
  }
  return true;
}

// Grids that cover the items in one pass, in several, with more threads than items, with one
// thread: every item is computed once, with the CPU kernel's bits.
TEST(CudaGridOnHost, EveryGridComputesEveryItemWithTheCpuKernelsBits) {
  std::vector<FusedSubgraph> sgs = layouts_and_reductions();
  for (FusedSubgraph& sg : every_primitive())
    if (sg.inputs[0].dtype == f32 || sg.inputs[0].dtype == bf16 || sg.inputs[0].dtype == i64)
      sgs.push_back(std::move(sg));
  cpu::HostGridKernels grids = cpu::compile_grid_kernels_for_host(sgs);
  ASSERT_EQ(grids.fns.size(), sgs.size());
  const std::vector<std::pair<int64_t, int64_t>> configs = {{1, 1}, {2, 7}, {3, 64}, {40, 32}};
  std::vector<cpu::FusedKernel> cpu_kernels = cpu::compile_elementwise(sgs);
  for (size_t k = 0; k < sgs.size(); ++k) {
    const FusedSubgraph& sg = sgs[k];
    std::vector<Tensor> in = inputs_for(sg, 11 + static_cast<uint32_t>(k));
    std::vector<Tensor> want = cpu_kernels[k].run(in);
    std::vector<void*> in_ptrs;
    for (Tensor& t : in) in_ptrs.push_back(t.raw_mutable_data());
    for (auto [blocks, threads] : configs) {
     for (int fill : {0xff, 0x5a}) {
      std::vector<Tensor> got;
      std::vector<void*> out_ptrs;
      for (size_t o = 0; o < sg.outputs.size(); ++o) {
        TensorType tt = sg.output_type(static_cast<int>(o));
        got.push_back(Tensor::empty(tt.dtype, tt.shape));
        // Two byte patterns (NaN and a large number; -1 and a large integer): an item not
        // computed keeps one of them at least, which no right result equals twice.
        std::memset(got.back().raw_mutable_data(), fill, got.back().nbytes());
        out_ptrs.push_back(got.back().raw_mutable_data());
      }
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t t = 0; t < threads; ++t)
          grids.fns[k](in_ptrs.data(), out_ptrs.data(), b, threads, t, blocks);
      for (size_t o = 0; o < got.size(); ++o)
        EXPECT_TRUE(bitwise_equal(got[o], want[o]))
            << sg.name << " output " << o << " on " << blocks << " x " << threads << ": got "
            << got[o].str() << ", want " << want[o].str();
     }
    }
  }
}

// The negative control: a grid kernel told its blocks have 9 threads when 8 run leaves the
// ninth thread's items uncomputed, and the check above would see them.
TEST(CudaGridOnHost, AGridThatMisreportsItsSizeIsCaught) {
  FusedSubgraph sg;
  sg.name = "negate";
  sg.add_output(sg.add(Prim::kNeg, {sg.add_input(f32, {100})}));
  cpu::HostGridKernels grids = cpu::compile_grid_kernels_for_host({sg});
  Tensor x = random_values(f32, {100}, 3);
  std::vector<float> xs = x.to_vector<float>();
  void* in = x.raw_mutable_data();
  for (int64_t reported : {8, 9}) {
    Tensor y = Tensor::empty(f32, {100});
    std::memset(y.raw_mutable_data(), 0xff, y.nbytes());  // NaN
    void* out = y.raw_mutable_data();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < 8; ++t) grids.fns[0](&in, &out, b, reported, t, 2);
    std::vector<float> v = y.to_vector<float>();
    int missed = 0;
    for (int i = 0; i < 100; ++i) {
      if (std::isnan(v[i])) {
        ++missed;
      } else {
        EXPECT_EQ(v[i], -xs[i]) << i;
      }
    }
    // Thread 8 of each block: items 8 + 18k and 17 + 18k, 11 of them below 100.
    EXPECT_EQ(missed, reported == 8 ? 0 : 11) << "block_dim reported as " << reported;
  }
}

// The random differential tests, every fused kernel run through its grid kernel on a host grid
// (KILN_TEST_ONLY_GRID_KERNELS, compiler/cpu/fused_kernel.h), against the interpreter. In a
// child process: the process-wide kernel cache must not keep grid kernels for other tests.
TEST(CudaGridOnHost, RandomGraphsMatchTheInterpreter) {
  const std::string log = ::testing::TempDir() + "/kiln_grid_" + std::to_string(getpid());
  const std::string filter =
      "--gtest_filter=Shard/CompiledRandomGraphs.MatchTheInterpreter/0:"
      "Shard/CompiledRandomGradients.MatchTheInterpreter/0:"
      "CpuCodegen*:CudaGridOnHost.ChildSawGridKernels";
  const std::map<std::string, std::string> env = {
      {"KILN_RANDOM_GRAPHS_PER_SHARD", "30"},
      {"GTEST_TOTAL_SHARDS", "1"},
      {"GTEST_SHARD_INDEX", "0"},
      {"KILN_TEST_ONLY_GRID_KERNELS", "run-on-a-host-grid"}};
  bool linked = false;  // kiln_gpu_tests holds the CUDA tests alone
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i)
    linked = linked || std::string(unit.GetTestSuite(i)->name()) == "Shard/CompiledRandomGraphs";
  if (!linked) GTEST_SKIP() << "this binary has no random graph tests";
  testing_util::ProcessResult r = testing_util::run_process({"/proc/self/exe", filter}, log, env);
  EXPECT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[       OK ] Shard/CompiledRandomGraphs.MatchTheInterpreter/0"));
  EXPECT_THAT(r.output,
              HasSubstr("[       OK ] Shard/CompiledRandomGradients.MatchTheInterpreter/0"));
  EXPECT_THAT(r.output, HasSubstr("[       OK ] CudaGridOnHost.ChildSawGridKernels"));
}

// Run by the test above in its child: the switch is on there, so kernels run on the grid.
TEST(CudaGridOnHost, ChildSawGridKernels) {
  if (!cpu::grid_kernels_for_tests()) GTEST_SKIP() << "only in RandomGraphsMatchTheInterpreter's child";
  FusedSubgraph sg;
  sg.add_output(sg.add(Prim::kAbs, {sg.add_input(f32, {1000})}));
  cpu::FusedKernel k = cpu::compile_elementwise(sg);
  EXPECT_TRUE(k.runs_on_grid());
  Tensor x = random_values(f32, {1000}, 5);
  std::vector<Tensor> y = k.run({x});
  std::vector<float> v = y[0].to_vector<float>(), xs = x.to_vector<float>();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(v[i], std::fabs(xs[i]));
}

// ---- on a GPU: these skip without one, saying so ----

bool gpu_present(std::string* why) { return runtime::cuda::driver(why) != nullptr; }

TEST(CudaGpu, WithoutAGpuLoadingSaysWhy) {
  std::string why;
  if (gpu_present(&why)) GTEST_SKIP() << "this machine has a GPU";
  FusedSubgraph sg;
  sg.name = "neg_kernel";
  sg.add_output(sg.add(Prim::kNeg, {sg.add_input(f32, {8})}));
  try {
    cuda::LoadedPtx::load(cuda::compile_ptx({sg}));
    ADD_FAILURE() << "loaded without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_THAT(e.what(), HasSubstr("neg_kernel"));
    EXPECT_THAT(e.what(), HasSubstr(why));
  }
}

// Whether `sg` calls a function the GPU takes from libdevice and the CPU from libm (or folds in
// another order): their results may differ in the last bits.
bool inexact_on_gpu(const FusedSubgraph& sg) {
  if (sg.has_reductions()) return true;
  for (const FusedSubgraph::Node& n : sg.nodes) {
    switch (n.op) {
      case Prim::kSin: case Prim::kCos: case Prim::kTan: case Prim::kPow: case Prim::kAtan2:
      case Prim::kLog1p: case Prim::kExpm1:
        return true;
      case Prim::kExp: case Prim::kLog: case Prim::kTanh: case Prim::kErf:
      case Prim::kLogistic:
        if (n.dtype == f64) return true;  // f32's are the same inline IR on both
        break;
      default:
        break;
    }
  }
  return false;
}

// Every primitive and dtype, the layouts and the reductions, on the GPU against the CPU's
// kernels: the same bits where both compute the same arithmetic, libdevice's functions within
// a few units in the last place of the dtype.
TEST(CudaGpu, KernelsMatchTheCpuKernels) {
  std::string why;
  if (!gpu_present(&why)) GTEST_SKIP() << "needs a GPU: " << why;
  std::vector<FusedSubgraph> sgs = layouts_and_reductions();
  for (FusedSubgraph& sg : every_primitive()) sgs.push_back(std::move(sg));
  std::shared_ptr<cuda::LoadedPtx> gpu = cuda::LoadedPtx::load(cuda::compile_ptx(sgs));
  std::vector<cpu::FusedKernel> cpu_kernels = cpu::compile_elementwise(sgs);
  for (size_t k = 0; k < sgs.size(); ++k) {
    std::vector<Tensor> in = inputs_for(sgs[k], 101 + static_cast<uint32_t>(k));
    std::vector<Tensor> got = gpu->run(k, in);
    std::vector<Tensor> want = cpu_kernels[k].run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      if (!inexact_on_gpu(sgs[k])) {
        EXPECT_TRUE(same_values(got[o], want[o]))
            << sgs[k].name << " output " << o << ": " << got[o].str() << " vs " << want[o].str();
        continue;
      }
      const DType t = want[o].dtype();
      const double rtol = t == f64 ? 1e-14 : t == f32 ? 2e-6 : t == f16 ? 2e-3 : 1.6e-2;
      std::vector<double> g = got[o].to_vector<double>(), w = want[o].to_vector<double>();
      for (size_t i = 0; i < g.size(); ++i) {
        if (std::isnan(w[i])) {
          EXPECT_TRUE(std::isnan(g[i])) << sgs[k].name << " element " << i;
        } else if (g[i] != w[i]) {  // (infinities are equal or wrong)
          EXPECT_NEAR(g[i], w[i], rtol * (std::abs(w[i]) + 1e-6)) << sgs[k].name << " element " << i;
        }
      }
    }
  }
}

// Bad input to a loaded kernel is an error naming the input and the types.
TEST(CudaGpu, RunChecksItsInputs) {
  std::string why;
  if (!gpu_present(&why)) GTEST_SKIP() << "needs a GPU: " << why;
  FusedSubgraph sg;
  sg.name = "twice";
  int x = sg.add_input(f32, {4});
  sg.add_output(sg.add(Prim::kAdd, {x, x}));
  std::shared_ptr<cuda::LoadedPtx> gpu = cuda::LoadedPtx::load(cuda::compile_ptx({sg}));
  try {
    gpu->run(0, {Tensor::from_vector(std::vector<double>{1, 2, 3}, {3})});
    ADD_FAILURE() << "ran on the wrong shape";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("input 0"));
    EXPECT_THAT(e.what(), HasSubstr("f32[4]"));
  }
  std::vector<Tensor> y = gpu->run(0, {Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {4}).to(f32)});
  EXPECT_EQ(y[0].to_vector<double>(), (std::vector<double>{2, 4, 6, 8}));
}

}  // namespace
}  // namespace kiln::compiler

// The CUDA libraries' backend (libkiln_cuda.so, runtime/cuda/cuda_plugin.h) and the cuBLASLt
// matmul on host tensors (compiler/cuda/blas.h): the library loads without the driver and
// exports its table; bad arguments are named before any GPU is asked for; without a GPU a
// matmul is kUnavailable saying why; on a GPU (skipped here, saying so) every dtype, transpose,
// bias and relu gives the CPU's bits on inputs whose sums are exact, and each shape's algorithm
// is chosen once.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <string>

#include "compiler/cuda/blas.h"
#include "compiler/cuda/ptx.h"
#include "kiln/kiln.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/plugin_loader.h"

namespace kiln::compiler::cuda {
namespace {

using ::testing::HasSubstr;
namespace plugin = runtime::cuda::plugin;

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

bool gpu_present(std::string* why) { return runtime::cuda::driver(why) != nullptr; }

// What the plugin test checks, in a child process (loading the plugin maps cudart and cuBLASLt
// for good, and other tests check that libkiln alone never does): "" when all holds, else why.
std::string check_plugin(const std::string& path) {
  const bool driver_before = mapped("libcuda.so");
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::string("dlopen: ") + dlerror();
  auto entry = reinterpret_cast<plugin::EntryFn>(dlsym(lib, plugin::kEntry));
  if (entry == nullptr) return std::string("no ") + plugin::kEntry;
  const plugin::Api* api = entry();
  if (!driver_before && mapped("libcuda.so")) return "loading the plugin loaded the driver";
  if (api == nullptr || api->abi_version != plugin::kAbiVersion) return "ABI version";
  if (!api->matmul || !api->synchronize || !api->algorithms_chosen) return "a null entry";
  if (!mapped("libcublasLt")) return "cuBLASLt is not linked";
  // Arguments it refuses before touching any device.
  plugin::Matmul m;
  m.m = -1;
  char err[256] = {0};
  if (api->matmul(&m, err, sizeof err) == 0 ||
      std::string(err).find("a dimension out of range") == std::string::npos)
    return std::string("a negative dimension: ") + err;
  m.m = 2;
  m.dtype = 7;
  if (api->matmul(&m, err, sizeof err) == 0 ||
      std::string(err).find("dtype code 7") == std::string::npos)
    return std::string("dtype code 7: ") + err;
  // cuDNN's entries, where the plugin has them (this machine's toolkit carries cuDNN), refuse
  // bad arguments before touching a device too.
  if ((api->conv == nullptr) != (api->conv_workspace == nullptr) ||
      (api->conv == nullptr) != (api->pool == nullptr))
    return "cuDNN's entries are half there";
  if (api->conv != nullptr) {
    if (!mapped("libcudnn")) return "cuDNN is not linked";
    plugin::Conv c;
    c.dtype = 7;
    size_t bytes = 0;
    if (api->conv_workspace(&c, &bytes, err, sizeof err) == 0 ||
        std::string(err).find("conv: dtype code 7") == std::string::npos)
      return std::string("conv dtype code 7: ") + err;
    c.dtype = plugin::kF32;
    c.pass = plugin::kConvKernelGrad;  // every size 0
    if (api->conv(&c, err, sizeof err) == 0 ||
        std::string(err).find("conv kernel grad: a size out of range") == std::string::npos)
      return std::string("conv sizes: ") + err;
    plugin::Pool p;
    p.kind = 9;
    if (api->pool(&p, err, sizeof err) == 0 ||
        std::string(err).find("pooling: kind code 9") == std::string::npos)
      return std::string("pool kind code 9: ") + err;
  }
  return "";
}

TEST(CudaBlas, ThePluginLoadsWithoutTheDriverAndExportsItsTable) {
  const std::string path = runtime::cuda::cuda_plugin_path();
  if (!std::ifstream(path).good())
    GTEST_SKIP() << "this build has no " << plugin::kLibrary << " (no CUDA toolkit)";
  // A fresh process (threadsafe style: fork and exec), which has loaded nothing yet.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string why = check_plugin(path);
        std::fprintf(stderr, "plugin check: %s\n", why.empty() ? "ok" : why.c_str());
        std::_Exit(why.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "plugin check: ok");
}

TEST(CudaBlas, BadArgumentsAreNamedBeforeAnyGpuIsAskedFor) {
  Tensor a = zeros({3, 4}, f32), b = zeros({5, 6}, f32);
  try {
    matmul_on_gpu(a, b);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("f32[3,4]"));
    EXPECT_THAT(e.what(), HasSubstr("inner dimensions 4 and 5"));
  }
  try {
    matmul_on_gpu(zeros({3, 4}, i32), zeros({4, 2}, i32));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("dtype i32"));
  }
  try {
    matmul_on_gpu(a, zeros({4, 6}, f32), zeros({5}, f32));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bias is f32[5], expected f32[6]"));
  }
}

TEST(CudaBlas, WithoutAGpuAMatmulSaysWhy) {
  std::string why;
  if (gpu_present(&why)) GTEST_SKIP() << "this machine has a GPU";
  try {
    matmul_on_gpu(zeros({2, 3}, f32), zeros({3, 4}, f32));
    ADD_FAILURE() << "ran without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_THAT(e.what(), HasSubstr(why));
  }
}

// Small integers: every sum is exact in f32, so the GPU's f32 accumulation and one rounding to
// the dtype give the CPU's bits.
Tensor small_ints(DType t, const Shape& s, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<double> v(num_elements(s));
  for (double& x : v) x = d(gen);
  return Tensor::from_vector(v, s).to(t);
}

TEST(CudaGpu, MatmulGivesTheCpusBits) {
  std::string why;
  if (!gpu_present(&why)) GTEST_SKIP() << "needs a GPU: " << why;
  struct Case {
    int64_t m, n, k;
  };
  uint32_t seed = 1;
  for (DType t : {f32, f16, bf16}) {
    for (Case c : {Case{1, 1, 1}, Case{37, 65, 129}, Case{128, 256, 64}, Case{3, 5, 0}}) {
      for (int mode = 0; mode < 8; ++mode) {
        GpuMatmulOptions o{.trans_a = (mode & 1) != 0, .trans_b = (mode & 2) != 0,
                           .relu = (mode & 4) != 0};
        Tensor a = small_ints(t, o.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, seed++);
        Tensor b = small_ints(t, o.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, seed++);
        Tensor bias = mode % 3 == 0 ? Tensor() : small_ints(t, {c.n}, seed++);
        Tensor got = matmul_on_gpu(a, b, bias, o);
        Tensor af = a.to(f32), bf = b.to(f32);
        if (o.trans_a) af = transpose(af, {1, 0});
        if (o.trans_b) bf = transpose(bf, {1, 0});
        Tensor want = matmul(af, bf);
        if (bias.defined()) want = add(want, bias.to(f32));
        if (o.relu) want = maximum(want, zeros({}, f32));
        want = want.to(t);
        EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>())
            << dtype_name(t) << " " << c.m << "x" << c.n << "x" << c.k << " mode " << mode;
      }
    }
  }
}

TEST(CudaGpu, EachMatmulShapeChoosesItsAlgorithmOnce) {
  std::string why;
  if (!gpu_present(&why)) GTEST_SKIP() << "needs a GPU: " << why;
  const plugin::Api& api = runtime::cuda::cuda_plugin("test");
  Tensor a = small_ints(f32, {19, 23}, 5), b = small_ints(f32, {23, 29}, 6);
  const int64_t before = api.algorithms_chosen();
  matmul_on_gpu(a, b);
  matmul_on_gpu(a, b);
  EXPECT_EQ(api.algorithms_chosen(), before + 1);
  matmul_on_gpu(b, small_ints(f32, {29, 3}, 7));
  EXPECT_EQ(api.algorithms_chosen(), before + 2);
}

// Whether cuBLASLt's relu epilogue keeps a NaN, as Kiln's relu (select(x <= 0, 0, x)) does; it
// documents the epilogue as max(x, 0). CUDA's fusion target fuses relu into a dot only where it
// does (compiler/llvm_ir/loop_target.cc): this fails if the target takes relu and the epilogue
// drops the NaN, and says what this GPU does either way.
TEST(CudaGpu, TheReluEpilogueKeepsANaNWhereTheTargetFusesRelu) {
  std::string why;
  if (!gpu_present(&why)) GTEST_SKIP() << "needs a GPU: " << why;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor a = Tensor::from_vector<float>({nan, 1, 2, 3}, {2, 2});
  const Tensor b = Tensor::from_vector<float>({1, 0, 0, 1}, {2, 2});
  for (bool with_bias : {false, true}) {
    const Tensor bias = with_bias ? Tensor::from_vector<float>({0.5f, -4}, {2}) : Tensor();
    const std::vector<float> got = matmul_on_gpu(a, b, bias, {.relu = true}).to_vector<float>();
    const bool keeps = std::isnan(got[0]) && std::isnan(got[1]);
    std::cout << "cuBLASLt relu epilogue" << (with_bias ? " with bias" : "") << ": NaN -> "
              << got[0] << ", " << got[1] << (keeps ? " (kept)" : " (dropped)") << "\n";
    EXPECT_TRUE(keeps || !fusion_target().epilogue_activation("dot", Activation::kRelu));
    EXPECT_EQ(got[2], with_bias ? 2.5f : 2.0f);
    EXPECT_EQ(got[3], with_bias ? 0.0f : 3.0f);
  }
}

}  // namespace
}  // namespace kiln::compiler::cuda

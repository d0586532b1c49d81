// kiln/device.h's memory functions over the CUDA device's BFC allocator
// (runtime/cuda/device_memory.h; the allocator's logic is tested on host memory in
// bfc_allocator_test.cc): arguments are checked without a GPU; without one, memory_stats says
// why; on a GPU (skipped here, saying so), a child process with KILN_GPU_MEMORY_LIMIT=64M sees
// its staging buffers in the stats and a request beyond the limit refused, naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "compiler/cuda/blas.h"
#include "kiln/kiln.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/driver.h"
#include "tests/subprocess.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

bool gpu_present(std::string* why) { return runtime::cuda::driver(why) != nullptr; }

using test_values::thrown_error;

TEST(DeviceMemory, ArgumentsAreCheckedWithoutAGpu) {
  Error e = thrown_error([] { memory_stats(Device::cpu()); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("cpu:0 has no device allocator"));
  e = thrown_error([] { set_memory_limit(Device::cuda(0), 0); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("a limit of 0 bytes"));
  e = thrown_error([] { set_memory_growth(Device::cpu(), true); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
}

TEST(DeviceMemory, WithoutAGpuStatsSayWhy) {
  std::string why;
  if (gpu_present(&why)) GTEST_SKIP() << "this machine has a GPU";
  Error e = thrown_error([] { memory_stats(Device::cuda(0)); });
  EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  EXPECT_THAT(e.what(), HasSubstr(why));
  // Options may still be set: they apply when a GPU's allocator is created.
  EXPECT_NO_THROW(set_memory_limit(Device::cuda(0), size_t{1} << 30));
  EXPECT_NO_THROW(set_memory_growth(Device::cuda(0), true));
}

TEST(CudaGpu, MemoryLimitIsEnforcedAndReported) {
  std::string why;
  if (!gpu_present(&why)) GTEST_SKIP() << "needs a GPU: " << why;
  const std::string log = ::testing::TempDir() + "/kiln_gpu_memory_" + std::to_string(getpid());
  testing_util::ProcessResult r = testing_util::run_process(
      {"/proc/self/exe", "--gtest_filter=CudaGpuChild.AllocationsWithin64M"}, log,
      {{"KILN_GPU_MEMORY_LIMIT", "64M"}, {"KILN_TEST_GPU_MEMORY_CHILD", "1"}});
  EXPECT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[  PASSED  ] 1 test"));
}

// Run by the test above in a child (the allocator is process-wide, created once).
TEST(CudaGpuChild, AllocationsWithin64M) {
  if (std::getenv("KILN_TEST_GPU_MEMORY_CHILD") == nullptr)
    GTEST_SKIP() << "only in MemoryLimitIsEnforcedAndReported's child";
  runtime::BfcAllocator& a = runtime::cuda::device_allocator();
  void* p = a.allocate(40 << 20);
  MemoryStats s = memory_stats(Device::cuda(0));
  EXPECT_EQ(s.bytes_limit, size_t{64} << 20);
  EXPECT_GE(s.bytes_in_use, size_t{40} << 20);
  Error e = thrown_error([&] { a.allocate(40 << 20); });
  EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  EXPECT_THAT(e.what(), HasSubstr("cuda:0"));
  a.deallocate(p);
  EXPECT_EQ(memory_stats(Device::cuda(0)).bytes_in_use, 0u);
  // The staging buffers of a GPU matmul (a, b and c) come from the same allocator.
  const int64_t allocs = memory_stats(Device::cuda(0)).num_allocs;
  Tensor x = ones({64, 64}, f32);
  compiler::cuda::matmul_on_gpu(x, x);
  s = memory_stats(Device::cuda(0));
  EXPECT_EQ(s.num_allocs, allocs + 3);
  EXPECT_EQ(s.bytes_in_use, 0u);
  e = thrown_error([] { set_memory_limit(Device::cuda(0), size_t{1} << 30); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kiln

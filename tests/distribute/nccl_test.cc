// The NCCL backend: without a GPU, creating a communicator or a group is a clear error; the
// backend's own library (libkiln_nccl.so) loads without libcuda and exports its entry points;
// with a GPU, every collective on a world of one gives the host's values, and with two, a group
// in one process sums and gathers both replicas (skipped here without them).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "distribute/nccl/nccl_plugin.h"
#include "kiln/device.h"
#include "kiln/distribute/collective.h"
#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln::distribute {
namespace {

// libkiln_nccl.so beside libkiln, or "" when this build has none.
std::string plugin_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&nccl_available), &info) == 0) return "";
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.rfind('/') + 1);
  const std::string path = dir + nccl_plugin::kLibrary;
  return std::ifstream(path).good() ? path : "";
}

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}

TEST(NcclCollective, WithoutAGpuCreatingOneIsUnavailableSayingSo) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: the GPU test covers creation";
  EXPECT_FALSE(nccl_available());
  try {
    make_nccl_collective();
    FAIL() << "make_nccl_collective returned";
  } catch (const Error& e) {
    const std::string what = e.what();
    if (plugin_path().empty()) {  // a build without the backend: the stub
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << what;
      EXPECT_NE(what.find("NCCL is unavailable in this build"), std::string::npos) << what;
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << what;
      EXPECT_NE(what.find("make_nccl_collective: no GPU"), std::string::npos) << what;
    }
  }
  try {
    make_nccl_group(2);
    FAIL() << "make_nccl_group returned";
  } catch (const Error& e) {
    const std::string what = e.what();
    if (plugin_path().empty()) {
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << what;
    } else {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << what;
      EXPECT_NE(what.find("make_nccl_group: no GPU"), std::string::npos) << what;
    }
  }
  EXPECT_FALSE(mapped("libnccl")) << "libkiln loaded NCCL without a GPU";
  EXPECT_FALSE(mapped("libcudart")) << "libkiln loaded cudart without a GPU";
}

TEST(NcclCollective, TheBackendsLibraryLoadsWithoutLibcudaAndExportsItsEntryPoints) {
  const std::string path = plugin_path();
  if (path.empty()) GTEST_SKIP() << "this build has no NCCL backend (no CUDA toolkit or NCCL)";
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  EXPECT_NE(dlsym(lib, nccl_plugin::kGetUniqueId), nullptr);
  EXPECT_NE(dlsym(lib, nccl_plugin::kMake), nullptr);
  EXPECT_NE(dlsym(lib, nccl_plugin::kMakeGroup), nullptr);
  EXPECT_TRUE(mapped("libnccl")) << "it links NCCL";
  if (cuda_device_count() == 0) {
    EXPECT_FALSE(mapped("libcuda.so")) << "loading the backend must not load the driver";
  }
}

// A world of one (MPI without mpirun): every collective equals its input, or the gathered rows.
TEST(NcclCollective, EveryCollectiveOnOneGpuGivesTheHostsValues) {
  if (cuda_device_count() == 0) {
    GTEST_SKIP() << "no GPU on this machine: NCCL needs one";
  }
  if (!mpi_available()) GTEST_SKIP() << "built without MPI, which bootstraps NCCL";
  std::unique_ptr<Collective> comm = make_nccl_collective({.timeout = Seconds(60)});
  ASSERT_EQ(comm->backend(), "nccl");
  ASSERT_EQ(comm->size(), 1);
  const Tensor x = random_uniform({6, 3}, 7, -1, 1);
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.to_vector<float>() == b.to_vector<float>();
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
    EXPECT_TRUE(same(comm->all_reduce(x, op), x)) << reduce_op_name(op);
  }
  EXPECT_TRUE(same(comm->all_gather(x), x));
  EXPECT_TRUE(same(comm->reduce_scatter(x), x));
  EXPECT_TRUE(same(comm->broadcast(x, 0), x));
  comm->barrier();
  const int64_t step = comm->start_all_reduce(x);
  EXPECT_TRUE(same(comm->wait(step), x));
  EXPECT_EQ(comm->steps(), 9);
}

// Two GPUs of this process, one thread each: the sums, means and gathers of both replicas.
TEST(NcclCollective, AGroupOfTwoGpusInOneProcessSumsAndGathersBothReplicas) {
  if (cuda_device_count() < 2) {
    GTEST_SKIP() << "needs 2 GPUs, this machine has " << cuda_device_count();
  }
  std::vector<std::unique_ptr<Collective>> group = make_nccl_group(2, {.timeout = Seconds(60)});
  const Tensor a = random_uniform({4, 3}, 1, -1, 1), b = random_uniform({4, 3}, 2, -1, 1);
  std::vector<Tensor> sums(2), gathers(2);
  std::vector<std::string> errors(2);
  auto replica = [&](int r) {
    try {
      sums[r] = group[r]->all_reduce(r == 0 ? a : b);
      gathers[r] = group[r]->all_gather(r == 0 ? a : b);
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  };
  std::thread other(replica, 1);
  replica(0);
  other.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  const std::vector<float> want = (a + b).to_vector<float>();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(sums[r].to_vector<float>(), want) << r;  // two terms: one rounding either way
    EXPECT_EQ(gathers[r].to_vector<float>(), concatenate({a, b}, 0).to_vector<float>()) << r;
  }
}

}  // namespace
}  // namespace kiln::distribute

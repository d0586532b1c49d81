// The NCCL backend's stub, built when the CUDA toolkit, the NCCL library or MPI is missing
// (distribute/nccl/nccl_loader.cc otherwise): NCCL is unavailable in this build.
#include "kiln/distribute/collective.h"
#include "kiln/error.h"

namespace kiln::distribute {

bool nccl_available() { return false; }

std::unique_ptr<Collective> make_nccl_collective(const CollectiveOptions&) {
  throw Error(ErrorCode::kUnimplemented,
              "make_nccl_collective: NCCL is unavailable in this build (Kiln was built without "
              "the CUDA toolkit, the NCCL library or MPI); use make_mpi_collective or "
              "make_in_process_group");
}

std::vector<std::unique_ptr<Collective>> make_nccl_group(int, const CollectiveOptions&) {
  throw Error(ErrorCode::kUnimplemented,
              "make_nccl_group: NCCL is unavailable in this build (Kiln was built without the "
              "CUDA toolkit, the NCCL library or MPI); use make_in_process_group");
}

}  // namespace kiln::distribute

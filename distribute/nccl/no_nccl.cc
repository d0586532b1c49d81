// The NCCL backend's stub, the only NCCL file built so far: every build reports NCCL as
// unavailable until the real backend (GPUs, bootstrapped over MPI) is added.
#include "kiln/distribute/collective.h"
#include "kiln/error.h"

namespace kiln::distribute {

bool nccl_available() { return false; }

std::unique_ptr<Collective> make_nccl_collective(const CollectiveOptions&) {
  throw Error(ErrorCode::kUnimplemented,
              "make_nccl_collective: NCCL is unavailable in this build (Kiln has no NCCL backend "
              "yet); use make_mpi_collective or make_in_process_group");
}

}  // namespace kiln::distribute

// Built when Kiln is configured without MPI (libopenmpi-dev not found, or KILN_MPI=OFF): the MPI
// backend reports that it is absent.
#include "kiln/distribute/collective.h"
#include "kiln/error.h"

namespace kiln::distribute {

bool mpi_available() { return false; }

std::unique_ptr<Collective> make_mpi_collective(const CollectiveOptions&) {
  throw Error(ErrorCode::kUnimplemented,
              "make_mpi_collective: this Kiln was built without MPI (install libopenmpi-dev and "
              "reconfigure with KILN_MPI=ON)");
}

}  // namespace kiln::distribute

// The entry points of libkiln_nccl.so, the NCCL backend built as a library of its own (it links
// cudart and NCCL, which libkiln must not load on machines without a GPU); nccl_loader.cc
// dlopens it only when a GPU is present and looks these up.
#pragma once

#include <memory>
#include <vector>

#include "kiln/distribute/collective.h"

namespace kiln::distribute::nccl_plugin {

struct UniqueId {
  char bytes[128];  // NCCL_UNIQUE_ID_BYTES
};

// A new NCCL unique id (on the group's rank 0). Throws kiln::Error.
using GetUniqueIdFn = void (*)(UniqueId* id);
// This rank's communicator over the group `id` names, on GPU local_rank % device count;
// `control` (a communicator over the same ranks) exchanges each collective's calls, so that
// disagreements and absent ranks are named. Throws kiln::Error.
using MakeFn = Collective* (*)(const UniqueId& id, int rank, int size, int local_rank,
                               std::unique_ptr<Collective>* control,
                               const CollectiveOptions& options);

// `controls->size()` ranks of this process, rank r on GPU r, each exchanging its calls over
// (*controls)[r] (an in-process group); appends them to `out`. Throws kiln::Error.
using MakeGroupFn = void (*)(std::vector<std::unique_ptr<Collective>>* controls,
                             const CollectiveOptions& options,
                             std::vector<std::unique_ptr<Collective>>* out);

inline constexpr const char* kLibrary = "libkiln_nccl.so";
inline constexpr const char* kMakeGroup = "kiln_nccl_make_group";
inline constexpr const char* kGetUniqueId = "kiln_nccl_get_unique_id";
inline constexpr const char* kMake = "kiln_nccl_make_collective";

}  // namespace kiln::distribute::nccl_plugin

// Host memory for tensors: 64-byte aligned blocks in power-of-two size classes (64 B to 1 MiB)
// cached per thread and in a shared pool that threads exchange blocks with in batches, as
// tcmalloc does. Small eager ops allocate and free several blocks each, and a data pipeline
// frees on its consumer thread what its workers allocated: through malloc both contend on
// arena locks. Larger blocks go straight to the system allocator.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::detail {

// At least `nbytes` (> 0) bytes aligned to kAlignment, or nullptr when memory is exhausted.
void* host_allocate(size_t nbytes);
// Returns a block from host_allocate(nbytes), with the same nbytes.
void host_free(void* data, size_t nbytes);

struct HostAllocatorStats {
  int64_t cached_bytes = 0;  // in the shared pool (thread caches not counted)
  int64_t transfers = 0;     // batches moved between thread caches and the shared pool
};
HostAllocatorStats host_allocator_stats();

}  // namespace kiln::detail

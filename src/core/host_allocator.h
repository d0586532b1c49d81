// Host memory for tensors: 64-byte aligned blocks in power-of-two size classes (64 B to 1 MiB)
// cached per thread and in a shared pool that threads exchange blocks with in batches, as
// tcmalloc does. Small eager ops allocate and free several blocks each, and a data pipeline
// frees on its consumer thread what its workers allocated: through malloc both contend on
// arena locks. Larger blocks go straight to the system allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "kiln/error.h"

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

// A standard allocator over host_allocate, for the small objects every tensor has (its
// TensorImpl and Storage with their shared_ptr control blocks): they too are made on one
// thread and dropped on another.
template <class T>
struct PooledAllocator {
  using value_type = T;
  PooledAllocator() = default;
  template <class U>
  PooledAllocator(const PooledAllocator<U>&) {}  // NOLINT: converting, as allocators are
  T* allocate(size_t n) {
    void* p = host_allocate(n * sizeof(T));
    if (!p) {
      throw Error(ErrorCode::kResourceExhausted, "out of memory: cannot allocate " +
                                                     std::to_string(n * sizeof(T)) +
                                                     " bytes for a tensor's bookkeeping");
    }
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) { host_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PooledAllocator<U>&) const {
    return true;
  }
};

// std::make_shared with the object and its control block in one pooled block.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PooledAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace kiln::detail

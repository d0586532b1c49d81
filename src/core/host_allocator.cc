// The size-class cache behind host_allocate: per-thread free lists (no locks) backed by one
// shared pool per class (a mutex, taken once per batch of blocks). Both are bounded, so a
// burst of frees returns memory to the system instead of hoarding it.
#include "src/core/host_allocator.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <new>
#include <vector>

#include "src/core/tensor_impl.h"

namespace kiln::detail {
namespace {

constexpr int kMinShift = 6;   // 64 B
constexpr int kMaxShift = 20;  // 1 MiB
constexpr int kClasses = kMaxShift - kMinShift + 1;
constexpr size_t kThreadCacheBytes = size_t{1} << 20;  // per class and thread, at most
constexpr size_t kPoolBytes = size_t{8} << 20;         // per class in the shared pool

int class_of(size_t nbytes) {
  int shift = kMinShift;
  while ((size_t{1} << shift) < nbytes) ++shift;
  return shift - kMinShift;
}
size_t class_size(int c) { return size_t{1} << (c + kMinShift); }
// Blocks a thread keeps per class, and how many move to or from the pool at once.
size_t thread_limit(int c) { return std::clamp<size_t>(kThreadCacheBytes / class_size(c), 4, 256); }
size_t batch_of(int c) { return std::max<size_t>(2, thread_limit(c) / 2); }

void* system_allocate(size_t size) {
  return ::operator new(size, std::align_val_t(kAlignment), std::nothrow);
}
void system_free(void* p) { ::operator delete(p, std::align_val_t(kAlignment)); }

struct Pool {
  std::mutex mu;
  std::array<std::vector<void*>, kClasses> blocks;
  int64_t transfers = 0;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: threads return blocks during exit
  return *p;
}

// Set once the thread's cache is destroyed. Trivially destructible, so it stays valid while
// the thread's other thread_local (or, on the main thread, static) objects are destroyed and
// may still free tensors: those go straight to the system.
thread_local bool t_cache_gone = false;

struct ThreadCache {
  std::array<std::vector<void*>, kClasses> blocks;
  ~ThreadCache() {  // the thread ends: its blocks go back to the pool (or the system)
    for (int c = 0; c < kClasses; ++c) give_back(c, blocks[c].size());
    t_cache_gone = true;
  }
  // Moves the last `n` blocks of class c to the pool, freeing what does not fit there.
  void give_back(int c, size_t n) {
    std::vector<void*>& mine = blocks[c];
    n = std::min(n, mine.size());
    if (n == 0) return;
    Pool& p = pool();
    size_t room;
    {
      std::lock_guard lock(p.mu);
      std::vector<void*>& shared = p.blocks[c];
      room = std::min(
          n, kPoolBytes / class_size(c) - std::min(kPoolBytes / class_size(c), shared.size()));
      shared.insert(shared.end(), mine.end() - static_cast<std::ptrdiff_t>(room), mine.end());
      ++p.transfers;
    }
    mine.resize(mine.size() - room);
    for (size_t i = 0; i < n - room; ++i) {
      system_free(mine.back());
      mine.pop_back();
    }
  }
};
// The thread's cache, or null once it is gone.
ThreadCache* thread_cache() {
  if (t_cache_gone) return nullptr;
  thread_local ThreadCache cache;
  return &cache;
}

}  // namespace

void* host_allocate(size_t nbytes) {
  if (nbytes > class_size(kClasses - 1)) return system_allocate(nbytes);
  const int c = class_of(nbytes);
  ThreadCache* cache = thread_cache();
  if (cache == nullptr) return system_allocate(class_size(c));
  std::vector<void*>& mine = cache->blocks[c];
  if (mine.empty()) {
    Pool& p = pool();
    std::lock_guard lock(p.mu);
    std::vector<void*>& shared = p.blocks[c];
    const size_t n = std::min(batch_of(c), shared.size());
    if (n > 0) {
      mine.insert(mine.end(), shared.end() - static_cast<std::ptrdiff_t>(n), shared.end());
      shared.resize(shared.size() - n);
      ++p.transfers;
    }
  }
  if (mine.empty()) return system_allocate(class_size(c));
  void* block = mine.back();
  mine.pop_back();
  return block;
}

void host_free(void* data, size_t nbytes) {
  if (!data) return;
  if (nbytes > class_size(kClasses - 1)) {
    system_free(data);
    return;
  }
  const int c = class_of(nbytes);
  ThreadCache* cache = thread_cache();
  if (cache == nullptr) {
    system_free(data);  // every block came from system_allocate
    return;
  }
  cache->blocks[c].push_back(data);
  if (cache->blocks[c].size() > thread_limit(c)) cache->give_back(c, batch_of(c));
}

HostAllocatorStats host_allocator_stats() {
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  HostAllocatorStats s;
  for (int c = 0; c < kClasses; ++c)
    s.cached_bytes += static_cast<int64_t>(p.blocks[c].size() * class_size(c));
  s.transfers = p.transfers;
  return s;
}

}  // namespace kiln::detail

// A best-fit-with-coalescing (BFC) allocator, as TensorFlow's GPU allocator: large regions are
// taken from a device (a RegionAllocator: the CUDA driver's memory, or host memory in tests)
// and carved into chunks. A request is rounded up to 256 bytes and served by the smallest free
// chunk that holds it (bins of power-of-two size classes, each ordered by size then address),
// split when the rest is worth keeping; a freed chunk merges with its free neighbours of the
// same region. The logic knows no device.
//
// Options, as TensorFlow's: memory growth (regions taken on demand, each twice the last, up to
// the limit; the default) or one region of the whole limit taken up front; and a hard limit on
// the bytes taken from the device. A request that cannot be served within the limit throws
// kiln::Error (kResourceExhausted) naming the request, the limit, the bytes in use and the
// largest free chunk; the allocator stays usable. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime {

// Where regions come from. alloc returns nullptr when the device has no memory left.
class RegionAllocator {
 public:
  virtual ~RegionAllocator() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr, size_t bytes) = 0;
};

// Host memory (aligned to 256 bytes): the tests' device, and a CPU arena if one is wanted.
class HostRegionAllocator final : public RegionAllocator {
 public:
  void* alloc(size_t bytes) override;
  void free(void* ptr, size_t bytes) override;
};

struct BfcOptions {
  size_t limit = 0;           // the most bytes taken from the device (required, > 0)
  bool allow_growth = true;   // false: one region of `limit` bytes, taken at construction
  size_t initial_region = 2 << 20;  // growth: the first region's size (later ones double)
  std::string name = "bfc";   // for errors: "GPU:0", ...
};

// "8G", "512M", "1.5GiB", "1000000": bytes (K, M, G, T are powers of 1024, with or without
// "iB"/"B"). Throws kiln::Error (kInvalidArgument) naming `what` and the text.
size_t parse_memory_size(const std::string& text, const std::string& what);

struct BfcStats {
  size_t bytes_in_use = 0;       // requested bytes of live allocations, rounded to 256
  size_t peak_bytes_in_use = 0;
  size_t bytes_reserved = 0;     // taken from the device (the regions)
  size_t bytes_limit = 0;
  size_t largest_free_block = 0;
  int64_t num_allocs = 0;        // allocations served so far
  int64_t live_allocs = 0;
  int64_t num_regions = 0;
  // 1 - largest free chunk / free bytes (0: the free memory is one chunk, or none is free).
  double fragmentation = 0;
  std::string str() const;
};

class BfcAllocator {
 public:
  // Throws kiln::Error (kInvalidArgument) for a zero limit; without growth, kResourceExhausted
  // when the device cannot give the whole limit.
  BfcAllocator(std::unique_ptr<RegionAllocator> device, BfcOptions options);
  ~BfcAllocator();  // returns every region to the device
  BfcAllocator(const BfcAllocator&) = delete;
  BfcAllocator& operator=(const BfcAllocator&) = delete;

  // A block of at least `bytes` bytes, aligned to 256; `bytes` 0 gives a 256-byte block.
  void* allocate(size_t bytes);
  // `ptr` from allocate (nullptr is ignored); anything else throws kInvalidArgument.
  void deallocate(void* ptr);
  // The size allocate gave `ptr` (rounded), or 0 when `ptr` is not a live block.
  size_t allocated_size(const void* ptr) const;

  BfcStats stats() const;
  const BfcOptions& options() const { return options_; }

  static constexpr size_t kAlignment = 256;

 private:
  struct Chunk {
    char* ptr = nullptr;
    size_t size = 0;
    bool in_use = false;
    int region = -1;
    Chunk* prev = nullptr;  // the neighbours in address order within the region
    Chunk* next = nullptr;
  };
  struct BySizeThenAddress {
    bool operator()(const Chunk* a, const Chunk* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  static constexpr int kBins = 40;
  static int bin_of(size_t size);

  Chunk* find_free(size_t rounded);          // removes it from its bin
  bool grow(size_t rounded);                 // a new region holding at least `rounded`
  void insert_free(Chunk* c);
  void remove_free(Chunk* c);
  void split(Chunk* c, size_t rounded);
  Chunk* merge(Chunk* c);                    // with free neighbours; returns the merged chunk
  [[noreturn]] void exhausted(size_t bytes, size_t rounded) const;

  std::unique_ptr<RegionAllocator> device_;
  BfcOptions options_;
  mutable std::mutex mu_;
  std::vector<std::pair<void*, size_t>> regions_;
  std::set<Chunk*, BySizeThenAddress> bins_[kBins];
  std::map<const void*, Chunk*> live_;  // in-use chunks by address
  std::vector<std::unique_ptr<Chunk>> chunks_;  // owns every chunk (split ones too)
  std::vector<Chunk*> spare_;                   // chunk objects merged away, for reuse
  size_t next_region_ = 0;
  BfcStats stats_;
};

}  // namespace kiln::runtime

// The best-fit-with-coalescing allocator (runtime/bfc_allocator.h).
#include "runtime/bfc_allocator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "kiln/error.h"

namespace kiln::runtime {
namespace {

std::string bytes_str(size_t n) {
  char buf[64];
  if (n >= (size_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", n, static_cast<double>(n) / (1 << 30));
  } else if (n >= (size_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%zu bytes (%.2f MiB)", n, static_cast<double>(n) / (1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%zu bytes", n);
  }
  return buf;
}

size_t floor_aligned(size_t n) { return n / BfcAllocator::kAlignment * BfcAllocator::kAlignment; }

}  // namespace

void* HostRegionAllocator::alloc(size_t bytes) {
  return std::aligned_alloc(BfcAllocator::kAlignment, floor_aligned(bytes + 255));
}

void HostRegionAllocator::free(void* ptr, size_t) { std::free(ptr); }

size_t parse_memory_size(const std::string& text, const std::string& what) {
  auto bad = [&] {
    throw Error(ErrorCode::kInvalidArgument,
                what + " '" + text +
                    "' is not a memory size (bytes, or a number with K, M, G or T, as \"8G\")");
  };
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(v) || v < 0) bad();
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && (unit.substr(1) == "B" || unit.substr(1) == "IB")) unit.resize(1);
  double scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K") {
    scale = 1024.0;
  } else if (unit == "M") {
    scale = 1024.0 * 1024;
  } else if (unit == "G") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    bad();
  }
  const double bytes = std::floor(v * scale);
  if (bytes >= static_cast<double>(std::numeric_limits<size_t>::max())) bad();
  return static_cast<size_t>(bytes);
}

std::string BfcStats::str() const {
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.3f", fragmentation);
  return "in use " + bytes_str(bytes_in_use) + " in " + std::to_string(live_allocs) +
         " blocks, peak " + bytes_str(peak_bytes_in_use) + ", reserved " +
         bytes_str(bytes_reserved) + " in " + std::to_string(num_regions) + " regions, limit " +
         bytes_str(bytes_limit) + ", largest free block " + bytes_str(largest_free_block) +
         ", fragmentation " + frag;
}

BfcAllocator::BfcAllocator(std::unique_ptr<RegionAllocator> device, BfcOptions options)
    : device_(std::move(device)), options_(std::move(options)) {
  options_.limit = floor_aligned(options_.limit);
  if (options_.limit == 0)
    throw Error(ErrorCode::kInvalidArgument,
                "BFC allocator '" + options_.name + "': the memory limit must be at least " +
                    std::to_string(kAlignment) + " bytes");
  stats_.bytes_limit = options_.limit;
  next_region_ = std::max(floor_aligned(options_.initial_region), kAlignment);
  if (!options_.allow_growth) {
    std::lock_guard<std::mutex> lock(mu_);
    next_region_ = options_.limit;
    if (!grow(options_.limit))
      throw Error(ErrorCode::kResourceExhausted,
                  "BFC allocator '" + options_.name + "': the device cannot give the " +
                      bytes_str(options_.limit) + " to reserve up front (memory growth is off)");
  }
}

BfcAllocator::~BfcAllocator() {
  for (const auto& [ptr, size] : regions_) device_->free(ptr, size);
}

int BfcAllocator::bin_of(size_t size) {
  int b = 0;
  for (size_t s = size / kAlignment; s > 1 && b < kBins - 1; s >>= 1) ++b;
  return b;
}

void BfcAllocator::insert_free(Chunk* c) { bins_[bin_of(c->size)].insert(c); }

void BfcAllocator::remove_free(Chunk* c) { bins_[bin_of(c->size)].erase(c); }

BfcAllocator::Chunk* BfcAllocator::find_free(size_t rounded) {
  Chunk probe;
  probe.size = rounded;
  for (int b = bin_of(rounded); b < kBins; ++b) {
    auto it = bins_[b].lower_bound(&probe);  // the smallest chunk of at least `rounded`
    if (it != bins_[b].end()) {
      Chunk* c = *it;
      bins_[b].erase(it);
      return c;
    }
  }
  return nullptr;
}

bool BfcAllocator::grow(size_t rounded) {
  const size_t available = options_.limit - stats_.bytes_reserved;
  if (available < rounded) return false;
  size_t size = std::min(std::max(rounded, next_region_), available);
  void* p = device_->alloc(size);
  if (p == nullptr && size > rounded) {  // the device has less: take only what is needed
    size = rounded;
    p = device_->alloc(size);
  }
  if (p == nullptr) return false;
  regions_.emplace_back(p, size);
  std::unique_ptr<Chunk> c = std::make_unique<Chunk>();
  c->ptr = static_cast<char*>(p);
  c->size = size;
  c->region = static_cast<int>(regions_.size()) - 1;
  insert_free(c.get());
  chunks_.push_back(std::move(c));
  stats_.bytes_reserved += size;
  ++stats_.num_regions;
  next_region_ = size > std::numeric_limits<size_t>::max() / 2 ? size : size * 2;
  return true;
}

void BfcAllocator::split(Chunk* c, size_t rounded) {
  Chunk* rest;
  if (spare_.empty()) {
    chunks_.push_back(std::make_unique<Chunk>());
    rest = chunks_.back().get();
  } else {
    rest = spare_.back();
    spare_.pop_back();
  }
  *rest = Chunk{};
  rest->ptr = c->ptr + rounded;
  rest->size = c->size - rounded;
  rest->region = c->region;
  rest->prev = c;
  rest->next = c->next;
  if (c->next) c->next->prev = rest;
  c->next = rest;
  c->size = rounded;
  insert_free(rest);
}

BfcAllocator::Chunk* BfcAllocator::merge(Chunk* c) {
  if (Chunk* n = c->next; n && !n->in_use) {
    remove_free(n);
    c->size += n->size;
    c->next = n->next;
    if (c->next) c->next->prev = c;
    spare_.push_back(n);
  }
  if (Chunk* p = c->prev; p && !p->in_use) {
    remove_free(p);
    p->size += c->size;
    p->next = c->next;
    if (p->next) p->next->prev = p;
    spare_.push_back(c);
    c = p;
  }
  return c;
}

void BfcAllocator::exhausted(size_t bytes, size_t rounded) const {
  BfcStats s = stats_;
  for (int b = kBins - 1; b >= 0 && s.largest_free_block == 0; --b)
    if (!bins_[b].empty()) s.largest_free_block = (*bins_[b].rbegin())->size;
  throw Error(ErrorCode::kResourceExhausted,
              "BFC allocator '" + options_.name + "': out of memory allocating " +
                  bytes_str(bytes) + (rounded != bytes ? " (" + bytes_str(rounded) + " rounded)" : "") +
                  ": limit " + bytes_str(options_.limit) + ", in use " +
                  bytes_str(s.bytes_in_use) + " in " + std::to_string(s.live_allocs) +
                  " blocks, reserved " + bytes_str(s.bytes_reserved) + ", largest free block " +
                  bytes_str(s.largest_free_block));
}

void* BfcAllocator::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > options_.limit) exhausted(bytes, bytes);
  const size_t rounded = std::max(kAlignment, floor_aligned(bytes + kAlignment - 1));
  Chunk* c = find_free(rounded);
  if (c == nullptr) {
    if (!grow(rounded)) exhausted(bytes, rounded);
    c = find_free(rounded);
  }
  if (c->size > rounded) split(c, rounded);
  c->in_use = true;
  live_.emplace(c->ptr, c);
  stats_.bytes_in_use += c->size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  ++stats_.num_allocs;
  ++stats_.live_allocs;
  return c->ptr;
}

void BfcAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", ptr);
    throw Error(ErrorCode::kInvalidArgument, "BFC allocator '" + options_.name + "': " + buf +
                                                 " is not a live block of this allocator");
  }
  Chunk* c = it->second;
  live_.erase(it);
  c->in_use = false;
  stats_.bytes_in_use -= c->size;
  --stats_.live_allocs;
  insert_free(merge(c));
}

size_t BfcAllocator::allocated_size(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  return it == live_.end() ? 0 : it->second->size;
}

BfcStats BfcAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  BfcStats s = stats_;
  for (int b = kBins - 1; b >= 0; --b) {
    if (!bins_[b].empty()) {
      s.largest_free_block = (*bins_[b].rbegin())->size;
      break;
    }
  }
  const size_t free = s.bytes_reserved - s.bytes_in_use;
  s.fragmentation =
      free == 0 ? 0 : 1 - static_cast<double>(s.largest_free_block) / static_cast<double>(free);
  return s;
}

}  // namespace kiln::runtime

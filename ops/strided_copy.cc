// The strided copy behind the layout kernels: dimension merging, row memcpy/fill fast paths,
// cache tiles for transposes, and parallel chunks over the output.
#include "ops/strided_copy.h"

#include <algorithm>
#include <cstring>

#include "kiln/error.h"
#include "runtime/thread_pool.h"
#include "src/core/type_switch.h"

namespace kiln::ops {
namespace {

// Drops size-1 dimensions and merges neighbours that are contiguous in both input and output,
// so a copy of contiguous rows becomes a few long rows.
StridedCopy simplified(const StridedCopy& c) {
  StridedCopy s;
  s.in_offset = c.in_offset;
  s.out_offset = c.out_offset;
  for (size_t d = 0; d < c.dims.size(); ++d) {
    if (c.dims[d] == 1) continue;
    if (!s.dims.empty() && s.in_strides.back() == c.in_strides[d] * c.dims[d] &&
        s.out_strides.back() == c.out_strides[d] * c.dims[d]) {
      s.dims.back() *= c.dims[d];
      s.in_strides.back() = c.in_strides[d];
      s.out_strides.back() = c.out_strides[d];
      continue;
    }
    s.dims.push_back(c.dims[d]);
    s.in_strides.push_back(c.in_strides[d]);
    s.out_strides.push_back(c.out_strides[d]);
  }
  if (s.dims.empty()) {  // a single element
    s.dims = {1};
    s.in_strides = {1};
    s.out_strides = {1};
  }
  return s;
}

constexpr int64_t kGrain = 1 << 15;  // elements per parallel task
constexpr int64_t kTile = 32;        // transpose tile edge

template <class E>
void copy_row(const E* in, E* out, int64_t n, int64_t si, int64_t so) {
  if (si == 1 && so == 1) {
    std::memcpy(out, in, n * sizeof(E));
  } else if (si == 0 && so == 1) {
    std::fill_n(out, n, *in);
  } else {
    for (int64_t j = 0; j < n; ++j) out[j * so] = in[j * si];
  }
}

// A transpose-like copy whose innermost output dimension reads the input with a large stride,
// while output dimension k reads it contiguously: copy kTile x kTile tiles of (k, last) so
// both sides stay in cache.
template <class E>
void tiled_copy(const StridedCopy& c, int k, const E* in, E* out) {
  const int r = static_cast<int>(c.dims.size());
  const int last = r - 1;
  const int64_t nk = c.dims[k], nl = c.dims[last];
  const int64_t isk = c.in_strides[k], isl = c.in_strides[last];
  const int64_t osk = c.out_strides[k], osl = c.out_strides[last];
  const int64_t tiles_k = (nk + kTile - 1) / kTile;
  int64_t outer = 1;
  for (int d = 0; d < last; ++d)
    if (d != k) outer *= c.dims[d];
  const int64_t grain = std::max<int64_t>(1, kGrain / (kTile * nl));
  runtime::parallel_for(outer * tiles_k, grain, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t i0 = (u % tiles_k) * kTile, i1 = std::min(nk, i0 + kTile);
      int64_t rem = u / tiles_k, io = c.in_offset, oo = c.out_offset;
      for (int d = last - 1; d >= 0; --d) {
        if (d == k) continue;
        int64_t idx = rem % c.dims[d];
        rem /= c.dims[d];
        io += idx * c.in_strides[d];
        oo += idx * c.out_strides[d];
      }
      for (int64_t j0 = 0; j0 < nl; j0 += kTile) {
        const int64_t j1 = std::min(nl, j0 + kTile);
        for (int64_t i = i0; i < i1; ++i) {
          const E* src = in + io + i * isk;
          E* dst = out + oo + i * osk;
          for (int64_t j = j0; j < j1; ++j) dst[j * osl] = src[j * isl];
        }
      }
    }
  });
}

template <class E>
void run_copy(const StridedCopy& c, const E* in, E* out) {
  const int r = static_cast<int>(c.dims.size());
  const int last = r - 1;
  const int64_t n = c.dims[last], si = c.in_strides[last], so = c.out_strides[last];
  if (si != 1 && si != 0 && r >= 2 && n >= 8) {
    for (int k = 0; k < last; ++k) {
      if ((c.in_strides[k] == 1 || c.in_strides[k] == -1) && c.dims[k] >= 8) {
        tiled_copy(c, k, in, out);
        return;
      }
    }
  }
  int64_t total = 1;
  for (int64_t d : c.dims) total *= d;
  // Each task takes a range of elements in output order, copying it row piece by row piece.
  runtime::parallel_for(total, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(r);
    int64_t io = c.in_offset, oo = c.out_offset, rem = begin;
    for (int d = last; d >= 0; --d) {
      idx[d] = rem % c.dims[d];
      rem /= c.dims[d];
      io += idx[d] * c.in_strides[d];
      oo += idx[d] * c.out_strides[d];
    }
    for (int64_t i = begin; i < end;) {
      const int64_t len = std::min(n - idx[last], end - i);
      copy_row(in + io, out + oo, len, si, so);
      i += len;
      idx[last] += len;
      io += len * si;
      oo += len * so;
      for (int d = last; d > 0 && idx[d] == c.dims[d]; --d) {  // carry to the next row
        io += c.in_strides[d - 1] - c.dims[d] * c.in_strides[d];
        oo += c.out_strides[d - 1] - c.dims[d] * c.out_strides[d];
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

}  // namespace

void strided_copy(const StridedCopy& copy, size_t elem_size, const void* in, void* out) {
  for (int64_t d : copy.dims)
    if (d == 0) return;
  StridedCopy c = simplified(copy);
  switch (elem_size) {
    case 1:
      return run_copy(c, static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out));
    case 2:
      return run_copy(c, static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out));
    case 4:
      return run_copy(c, static_cast<const uint32_t*>(in), static_cast<uint32_t*>(out));
    case 8:
      return run_copy(c, static_cast<const uint64_t*>(in), static_cast<uint64_t*>(out));
  }
  throw Error(ErrorCode::kInternal, "strided_copy: unsupported element size");
}

bool is_identity(const StridedCopy& copy, int64_t in_size) {
  StridedCopy c = simplified(copy);
  return c.dims.size() == 1 && c.dims[0] == in_size && c.in_strides[0] == 1 &&
         c.out_strides[0] == 1 && c.in_offset == 0 && c.out_offset == 0;
}

void fill(void* out, int64_t n, size_t elem_size, const void* value) {
  auto run = [&](auto tag) {
    using E = typename decltype(tag)::type;
    E v;
    std::memcpy(&v, value, sizeof(E));
    E* o = static_cast<E*>(out);
    runtime::parallel_for(n, kGrain, [&](int64_t b, int64_t e) { std::fill(o + b, o + e, v); });
  };
  switch (elem_size) {
    case 1:
      return run(TypeTag<uint8_t>{});
    case 2:
      return run(TypeTag<uint16_t>{});
    case 4:
      return run(TypeTag<uint32_t>{});
    case 8:
      return run(TypeTag<uint64_t>{});
  }
  throw Error(ErrorCode::kInternal, "fill: unsupported element size");
}

}  // namespace kiln::ops

// Gradient buckets: the values a train step sums over the replicas, cut into buckets of at most
// a given size, one all_reduce each (kiln/distribute/ops.h, all_reduce_in_buckets), and the
// strategy's bucket size.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/distribute/ops.h"
#include "kiln/distribute/strategy.h"
#include "kiln/error.h"
#include "kiln/op_registry.h"
#include "kiln/ops.h"

namespace kiln::distribute {
namespace {

// Elements [begin, end) of a flat value.
struct Piece {
  size_t value;
  int64_t begin, end;
};

Tensor flat_range(const Tensor& flat, int64_t begin, int64_t end) {
  return begin == 0 && end == flat.dim(0) ? flat : slice(flat, {begin}, {end});
}

Tensor concatenated(const std::vector<Tensor>& parts) {
  return parts.size() == 1 ? parts[0] : concatenate(parts, 0);
}

// KILN_OVERLAP_COLLECTIVES=0 records each bucket as one blocking all_reduce instead.
bool overlapped() {
  const char* env = std::getenv("KILN_OVERLAP_COLLECTIVES");
  return env == nullptr || std::string(env) != "0";
}

}  // namespace

void Strategy::set_bucket_bytes(int64_t bytes) {
  if (bytes < 0) {
    throw Error(
        ErrorCode::kInvalidArgument,
        name() + ": bucket_bytes must be 0 (one bucket) or more, got " + std::to_string(bytes));
  }
  bucket_bytes_ = bytes;
}

std::vector<Tensor> all_reduce_in_buckets(const std::vector<Tensor>& values, int64_t bucket_bytes,
                                          bool overlap) {
  if (bucket_bytes < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "all_reduce_in_buckets: bucket_bytes must be 0 (one bucket) or more, got " +
                    std::to_string(bucket_bytes));
  }
  DType wide = DType::f32;
  for (const Tensor& v : values)
    if (v.dtype() == DType::f64) wide = DType::f64;
  std::vector<Tensor> flat;
  int64_t total = 0;
  for (const Tensor& v : values) {
    const Tensor w = v.dtype() == wide ? v : convert(v, wide);
    flat.push_back(reshape(w, {num_elements(v.shape())}));
    total += flat.back().dim(0);
  }
  const int64_t capacity =
      bucket_bytes == 0
          ? std::max<int64_t>(total, 1)
          : std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(dtype_size(wide)));

  // Fill buckets from the last value back; within a value, its elements in order.
  std::vector<std::vector<Piece>> buckets;
  int64_t room = 0;
  for (size_t i = values.size(); i-- > 0;) {
    for (int64_t at = 0; at < flat[i].dim(0);) {
      if (room == 0) {
        buckets.emplace_back();
        room = capacity;
      }
      const int64_t take = std::min(room, flat[i].dim(0) - at);
      buckets.back().push_back({i, at, at + take});
      at += take;
      room -= take;
    }
  }

  // One all_reduce per bucket, started after the previous one (a start and a done, so that the
  // compiler overlaps it with what runs between them); its result cut back into pieces.
  std::vector<std::vector<Tensor>> summed_pieces(values.size());
  Tensor previous;  // the previous bucket's token
  for (const std::vector<Piece>& bucket : buckets) {
    std::vector<Tensor> parts;
    for (const Piece& p : bucket) parts.push_back(flat_range(flat[p.value], p.begin, p.end));
    const Tensor x = concatenated(parts);
    std::vector<Tensor> inputs = {x};
    if (previous.defined()) inputs.push_back(previous);
    const Attrs sum_op = {{"op", std::string("sum")}};
    if (!overlap || !overlapped()) {
      const Tensor sum = call_op("all_reduce", inputs, sum_op)[0];
      int64_t at = 0;
      for (const Piece& p : bucket) {
        summed_pieces[p.value].push_back(flat_range(sum, at, at + (p.end - p.begin)));
        at += p.end - p.begin;
      }
      previous = sum;
      continue;
    }
    const Tensor token = call_op("all_reduce_start", inputs, sum_op)[0];
    const Tensor sum = call_op("all_reduce_done", {token, x}, {})[0];
    int64_t at = 0;
    for (const Piece& p : bucket) {
      const int64_t n = p.end - p.begin;
      summed_pieces[p.value].push_back(flat_range(sum, at, at + n));
      at += n;
    }
    previous = token;
  }

  std::vector<Tensor> out;
  for (size_t i = 0; i < values.size(); ++i) {
    const Tensor& v = values[i];
    Tensor summed = summed_pieces[i].empty() ? flat[i] : concatenated(summed_pieces[i]);
    summed = reshape(summed, v.shape());
    out.push_back(v.dtype() == wide ? summed : convert(summed, v.dtype()));
  }
  return out;
}

}  // namespace kiln::distribute

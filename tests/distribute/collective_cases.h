// The inputs each replica gives the collectives in tests, and the results they must produce,
// computed here element by element (shared by the in-process test and the MPI worker).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/distribute/collective.h"

namespace kiln::testing_util {

inline const std::vector<DType> kCollectiveDTypes = {DType::f32, DType::f64, DType::i8,
                                                     DType::u8,  DType::i32, DType::i64};
inline const std::vector<distribute::ReduceOp> kReduceOps = {
    distribute::ReduceOp::kSum, distribute::ReduceOp::kMean, distribute::ReduceOp::kMax,
    distribute::ReduceOp::kMin};

// Element i of replica r: small integers (exact in every dtype, sums fit in i8), negative
// ones too except for u8, different on every replica.
inline int64_t case_value(DType dtype, int rank, int64_t i) {
  const int64_t v = (i * 7 + rank * 3) % 11;
  return dtype == DType::u8 ? v : v - 5;
}

template <class F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::i8:
      return f(int8_t{});
    case DType::u8:
      return f(uint8_t{});
    case DType::i32:
      return f(int32_t{});
    default:
      return f(int64_t{});
  }
}

// Replica `rank`'s input: `rows` rows of 3 (row offsets let all_gather rows differ).
inline Tensor case_input(DType dtype, int rank, int64_t rows, int64_t first = 0) {
  Tensor t;
  with_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> v;
    for (int64_t i = 0; i < rows * 3; ++i)
      v.push_back(static_cast<T>(case_value(dtype, rank, first + i)));
    t = Tensor::from_vector(v, {rows, 3});
  });
  return t;
}

// all_reduce of case_input(dtype, r, rows) over `size` replicas, folded in rank order.
inline Tensor case_all_reduce(DType dtype, distribute::ReduceOp op, int size, int64_t rows) {
  Tensor t;
  with_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> v;
    for (int64_t i = 0; i < rows * 3; ++i) {
      T acc = static_cast<T>(case_value(dtype, 0, i));
      for (int r = 1; r < size; ++r) {
        const T x = static_cast<T>(case_value(dtype, r, i));
        switch (op) {
          case distribute::ReduceOp::kMax:
            acc = x > acc ? x : acc;
            break;
          case distribute::ReduceOp::kMin:
            acc = x < acc ? x : acc;
            break;
          default:
            acc = static_cast<T>(acc + x);
        }
      }
      if (op == distribute::ReduceOp::kMean) {
        if constexpr (std::is_floating_point_v<T>) {
          acc = acc / static_cast<T>(size);
        } else {
          acc = static_cast<T>(static_cast<int64_t>(acc) / size);
        }
      }
      v.push_back(acc);
    }
    t = Tensor::from_vector(v, {rows, 3});
  });
  return t;
}

// Equal dtype, shape and bytes.
inline bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Rows [begin, end) of a [rows, 3] tensor.
inline Tensor case_rows(const Tensor& t, int64_t begin, int64_t end) {
  const size_t row_bytes = 3 * dtype_size(t.dtype());
  return Tensor::from_bytes(t.dtype(), {end - begin, 3},
                            static_cast<const char*>(t.raw_data()) + begin * row_bytes,
                            (end - begin) * row_bytes);
}

// Runs every collective on every dtype and op as replica `c.rank()` would, returning one line
// per result that differs from what the test computes (empty: all correct). Replica r gathers
// (r + 1) * scale rows, so all_gather's rows differ across replicas. `scale` makes every
// tensor that many times larger (a backend may move large buffers another way).
inline std::vector<std::string> check_every_collective(distribute::Collective& c,
                                                       int64_t scale = 1) {
  std::vector<std::string> failures;
  const int size = c.size(), rank = c.rank();
  const int64_t rows = 2 * size * scale;  // divisible by size, for reduce_scatter
  auto expect = [&](const std::string& what, const Tensor& got, const Tensor& want) {
    if (!same_tensor(got, want)) {
      failures.push_back("rank " + std::to_string(rank) + " " + what + ": got " + got.str() +
                         ", want " + want.str());
    }
  };
  for (DType dtype : kCollectiveDTypes) {
    const std::string dt = dtype_name(dtype);
    const Tensor x = case_input(dtype, rank, rows);
    for (distribute::ReduceOp op : kReduceOps) {
      const std::string name = std::string("(") + distribute::reduce_op_name(op) + ") " + dt;
      const Tensor all = case_all_reduce(dtype, op, size, rows);
      expect("all_reduce" + name, c.all_reduce(x, op), all);
      expect("reduce_scatter" + name, c.reduce_scatter(x, op),
             case_rows(all, rank * rows / size, (rank + 1) * rows / size));
    }
    // all_gather: replica r gives (r + 1) * scale rows starting at element 100 * r.
    Tensor gathered = c.all_gather(case_input(dtype, rank, (rank + 1) * scale, 100 * rank));
    const Shape gathered_shape = {size * (size + 1) / 2 * scale, 3};
    int64_t row = 0;
    for (int r = 0; r < size; ++r) {
      if (gathered.shape() != gathered_shape) break;
      expect("all_gather rows of rank " + std::to_string(r) + " " + dt,
             case_rows(gathered, row, row + (r + 1) * scale),
             case_input(dtype, r, (r + 1) * scale, 100 * r));
      row += (r + 1) * scale;
    }
    if (gathered.shape() != gathered_shape) {
      failures.push_back("rank " + std::to_string(rank) + " all_gather " + dt + ": shape " +
                         shape_str(gathered.shape()));
    }
    for (int root = 0; root < size; ++root) {
      expect("broadcast(root " + std::to_string(root) + ") " + dt, c.broadcast(x, root),
             case_input(dtype, root, rows));
    }
  }
  c.barrier();
  return failures;
}

}  // namespace kiln::testing_util

// The reshaping layers. While a model traces its steps the batch dimension is unknown: the
// layers use ops that keep it (reshape with -1, gather along the other axes, pad) and need the
// other dimensions they change to be known.
#include "kiln/nn/reshaping_layers.h"

#include <algorithm>
#include <numeric>

#include "kiln/nn/layer_registry.h"
#include "kiln/ops.h"
#include "src/api/nn/layer_util.h"

namespace kiln::nn {
namespace {

// Height and width of an NHWC input, which must be known.
std::pair<int64_t, int64_t> known_hw(const Tensor& x, const std::string& where) {
  if (x.dim(1) == kUnknownDim || x.dim(2) == kUnknownDim) {
    throw Error(ErrorCode::kInvalidArgument,
                where + " needs a known height and width, got input " + shape_str(x.shape()));
  }
  return {x.dim(1), x.dim(2)};
}

// x's elements at `positions` (i64 indices) along `axis`, any other dimension unknown or not.
Tensor take(const Tensor& x, int64_t axis, const std::vector<int64_t>& positions) {
  const auto count = static_cast<int64_t>(positions.size());
  return gather(x, Tensor::from_vector(positions, {count}), axis);
}

// count elements from `start` along `axis`: a slice when x's shape is known, else a gather.
Tensor take_range(const Tensor& x, int64_t axis, int64_t start, int64_t count) {
  if (!is_fully_defined(x.shape())) {
    std::vector<int64_t> positions(count);
    std::iota(positions.begin(), positions.end(), start);
    return take(x, axis, positions);
  }
  Axes low(x.rank(), 0), limit = x.shape();
  low[axis] = start;
  limit[axis] = start + count;
  return slice(x, low, limit);
}

std::string margins_str(const Margins2D& m) {
  return "{{" + std::to_string(m.rows.first) + "," + std::to_string(m.rows.second) + "},{" +
         std::to_string(m.cols.first) + "," + std::to_string(m.cols.second) + "}}";
}

Margins2D checked_margins(const Margins2D& m, const std::string& what) {
  if (std::min({m.rows.first, m.rows.second, m.cols.first, m.cols.second}) < 0) {
    throw Error(ErrorCode::kInvalidArgument, what + " must not be negative, got " + margins_str(m) +
                                                 " ({{top, bottom}, {left, right}})");
  }
  return m;
}

Attrs margins_config(const std::string& key, const Margins2D& m) {
  return {{key, std::vector<int64_t>{m.rows.first, m.rows.second, m.cols.first, m.cols.second}}};
}

Margins2D margins_from_config(const Attrs& c, const std::string& key) {
  const std::vector<int64_t>& v = c.get_ints(key);
  if (v.size() != 4) {
    throw Error(ErrorCode::kInvalidArgument, "'" + key +
                                                 "' must hold 4 values (top, bottom, "
                                                 "left, right), got " +
                                                 detail::ints_str(v));
  }
  return {{v[0], v[1]}, {v[2], v[3]}};
}

}  // namespace

// ---- Reshape --------------------------------------------------------------------------------

Reshape::Reshape(Shape target_shape) : Layer("reshape"), target_(std::move(target_shape)) {
  const auto inferred = std::count(target_.begin(), target_.end(), -1);
  const bool sizes_ok =
      std::all_of(target_.begin(), target_.end(), [](int64_t d) { return d > 0 || d == -1; });
  if (inferred > 1 || !sizes_ok) {
    throw Error(ErrorCode::kInvalidArgument,
                "Reshape: target_shape " + detail::ints_str(target_) +
                    " must hold positive sizes and at most one -1 (without the batch dimension)");
  }
}

Tensor Reshape::call(const std::vector<Tensor>& inputs, CallContext&) {
  const std::string where = "Reshape '" + name() + "'";
  const Tensor& x = detail::single_input_of_rank(inputs, -1, where, "");
  if (x.rank() < 1) {
    throw Error(ErrorCode::kInvalidArgument, where + " needs a batch dimension, got a scalar");
  }
  const int64_t n = num_elements(Shape(x.shape().begin() + 1, x.shape().end()));
  int64_t known = 1;
  for (int64_t d : target_) known *= d == -1 ? 1 : d;
  Shape out = {-1};
  out.insert(out.end(), target_.begin(), target_.end());
  auto inferred = std::find(out.begin() + 1, out.end(), -1);
  const std::string what = where + ": cannot reshape input " + shape_str(x.shape()) +
                           " to target_shape " + detail::ints_str(target_);
  if (inferred != out.end()) {
    if (n == kUnknownDim) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": the -1 needs the input's dimensions after the batch to be known");
    }
    if (n % known != 0) {
      throw Error(ErrorCode::kInvalidArgument, what + ": " + std::to_string(n) +
                                                   " values per example are not a multiple of " +
                                                   std::to_string(known));
    }
    *inferred = n / known;
  } else if (n != kUnknownDim && n != known) {
    throw Error(ErrorCode::kInvalidArgument, what + ": " + std::to_string(n) +
                                                 " values per example, the target holds " +
                                                 std::to_string(known));
  }
  return reshape(x, out);
}

Attrs Reshape::config() const { return {{"target_shape", target_}}; }

// ---- Permute --------------------------------------------------------------------------------

Permute::Permute(std::vector<int64_t> dims) : Layer("permute"), dims_(std::move(dims)) {
  std::vector<int64_t> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] != static_cast<int64_t>(i) + 1) {
      throw Error(ErrorCode::kInvalidArgument,
                  "Permute: dims must be a permutation of 1.." + std::to_string(dims_.size()) +
                      " (1-based, without the batch dimension), got " + detail::ints_str(dims_));
    }
  }
}

Tensor Permute::call(const std::vector<Tensor>& inputs, CallContext&) {
  const auto rank = static_cast<int64_t>(dims_.size()) + 1;
  const std::string where = "Permute '" + name() + "' with dims " + detail::ints_str(dims_);
  const Tensor& x =
      detail::single_input_of_rank(inputs, rank, where, "of rank " + std::to_string(rank) + " (with the batch)");
  Axes perm = {0};
  perm.insert(perm.end(), dims_.begin(), dims_.end());
  return transpose(x, perm);
}

Attrs Permute::config() const { return {{"dims", dims_}}; }

// ---- RepeatVector ---------------------------------------------------------------------------

RepeatVector::RepeatVector(int64_t n) : Layer("repeat_vector"), n_(n) {
  if (n <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "RepeatVector: n must be positive, got " + std::to_string(n));
  }
}

Tensor RepeatVector::call(const std::vector<Tensor>& inputs, CallContext&) {
  const std::string where = "RepeatVector '" + name() + "'";
  const Tensor& x = detail::single_input_of_rank(inputs, 2, where, "[batch, features]");
  return take(expand_dims(x, 1), 1, std::vector<int64_t>(n_, 0));
}

Attrs RepeatVector::config() const { return {{"n", n_}}; }

// ---- UpSampling2D ---------------------------------------------------------------------------

UpSampling2D::UpSampling2D(std::vector<int64_t> size)
    : Layer("up_sampling2d"), size_(std::move(size)) {
  if (size_.size() != 2 || size_[0] <= 0 || size_[1] <= 0) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "UpSampling2D: size must be two positive values {rows, cols}, got " + detail::ints_str(size_));
  }
}

Tensor UpSampling2D::call(const std::vector<Tensor>& inputs, CallContext&) {
  const std::string where = "UpSampling2D '" + name() + "'";
  const Tensor& x = detail::single_input_of_rank(inputs, 4, where, "[batch, h, w, channels]");
  auto [h, w] = known_hw(x, where);
  // Output row i shows input row i / size.
  auto sources = [](int64_t n, int64_t size) {
    std::vector<int64_t> positions(n * size);
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i) / size;
    return positions;
  };
  return take(take(x, 1, sources(h, size_[0])), 2, sources(w, size_[1]));
}

Attrs UpSampling2D::config() const { return {{"size", size_}}; }

// ---- ZeroPadding2D, Cropping2D ----------------------------------------------------------------

ZeroPadding2D::ZeroPadding2D(int64_t padding) : ZeroPadding2D({padding, padding}) {}
ZeroPadding2D::ZeroPadding2D(std::pair<int64_t, int64_t> padding)
    : ZeroPadding2D(Margins2D{{padding.first, padding.first}, {padding.second, padding.second}}) {}
ZeroPadding2D::ZeroPadding2D(Margins2D padding)
    : Layer("zero_padding2d"), padding_(checked_margins(padding, "ZeroPadding2D: padding")) {}

Tensor ZeroPadding2D::call(const std::vector<Tensor>& inputs, CallContext&) {
  const Tensor& x =
      detail::single_input_of_rank(inputs, 4, "ZeroPadding2D '" + name() + "'", "[batch, h, w, channels]");
  return pad(x, {0, padding_.rows.first, padding_.cols.first, 0},
             {0, padding_.rows.second, padding_.cols.second, 0});
}

Attrs ZeroPadding2D::config() const { return margins_config("padding", padding_); }

Cropping2D::Cropping2D(int64_t cropping) : Cropping2D({cropping, cropping}) {}
Cropping2D::Cropping2D(std::pair<int64_t, int64_t> cropping)
    : Cropping2D(Margins2D{{cropping.first, cropping.first}, {cropping.second, cropping.second}}) {}
Cropping2D::Cropping2D(Margins2D cropping)
    : Layer("cropping2d"), cropping_(checked_margins(cropping, "Cropping2D: cropping")) {}

Tensor Cropping2D::call(const std::vector<Tensor>& inputs, CallContext&) {
  const std::string where = "Cropping2D '" + name() + "'";
  const Tensor& x = detail::single_input_of_rank(inputs, 4, where, "[batch, h, w, channels]");
  auto [h, w] = known_hw(x, where);
  const int64_t rows = h - cropping_.rows.first - cropping_.rows.second;
  const int64_t cols = w - cropping_.cols.first - cropping_.cols.second;
  if (rows <= 0 || cols <= 0) {
    throw Error(ErrorCode::kInvalidArgument, where + ": cropping " + margins_str(cropping_) +
                                                 " leaves no " + (rows <= 0 ? "rows" : "columns") +
                                                 " of input " + shape_str(x.shape()));
  }
  return take_range(take_range(x, 1, cropping_.rows.first, rows), 2, cropping_.cols.first, cols);
}

Attrs Cropping2D::config() const { return margins_config("cropping", cropping_); }

// ---- registration (for saved models) --------------------------------------------------------

KILN_REGISTER_LAYER("Reshape", [](const Attrs& c) {
  return std::make_shared<Reshape>(c.get_ints("target_shape"));
});
KILN_REGISTER_LAYER("Permute",
                    [](const Attrs& c) { return std::make_shared<Permute>(c.get_ints("dims")); });
KILN_REGISTER_LAYER("RepeatVector",
                    [](const Attrs& c) { return std::make_shared<RepeatVector>(c.get_int("n")); });
KILN_REGISTER_LAYER("UpSampling2D", [](const Attrs& c) {
  return std::make_shared<UpSampling2D>(c.get_ints("size"));
});
KILN_REGISTER_LAYER("ZeroPadding2D", [](const Attrs& c) {
  return std::make_shared<ZeroPadding2D>(margins_from_config(c, "padding"));
});
KILN_REGISTER_LAYER("Cropping2D", [](const Attrs& c) {
  return std::make_shared<Cropping2D>(margins_from_config(c, "cropping"));
});

}  // namespace kiln::nn

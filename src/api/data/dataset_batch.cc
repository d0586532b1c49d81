// batch, padded_batch and ragged_batch: groups of elements stacked along a new dimension 0
// (padded to a common shape for padded_batch), or joined along dimension 0 with row_splits
// for ragged_batch.
#include <algorithm>
#include <cstring>
#include <utility>

#include "runtime/thread_pool.h"
#include "src/api/data/dataset_node.h"
#include "src/core/float16_rounding.h"
#include "src/core/type_switch.h"

namespace kiln::data::detail {
namespace {

// The elements of the next batch: n of the input's, fewer only at its end (and then none if
// drop_remainder); none once the input is done, which is then released.
std::vector<Element> next_group(std::unique_ptr<IteratorImpl>& input, int64_t n,
                                bool drop_remainder) {
  std::vector<Element> elements;
  if (!input) return elements;
  elements.reserve(static_cast<size_t>(std::min<int64_t>(n, 4096)));  // grows if n is larger
  while (static_cast<int64_t>(elements.size()) < n) {
    runtime::ThreadPool::yield_to_tasks();  // made by a pool worker: the step's kernels first
    std::optional<Element> e = input->next();
    if (!e) break;
    elements.push_back(std::move(*e));
  }
  if (static_cast<int64_t>(elements.size()) < n) {
    input.reset();
    if (drop_remainder) elements.clear();
  }
  return elements;
}

// Every element has as many components as the first, each concrete, of the first's dtype and
// (for batch) shape.
void check_structure(const std::vector<Element>& elements, const char* who, bool same_shapes) {
  const Element& first = elements[0];
  for (size_t i = 0; i < elements.size(); ++i) {
    const Element& e = elements[i];
    if (e.size() != first.size()) {
      invalid(std::string(who) + ": element " + std::to_string(i) + " of the batch has " +
              std::to_string(e.size()) + " components, element 0 has " +
              std::to_string(first.size()));
    }
    for (size_t c = 0; c < e.size(); ++c) {
      const Tensor& t = e[c];
      // Built only for a message: this runs for every component of every element.
      auto where = [&] {
        return std::string(who) + ": component " + std::to_string(c) + " of element " +
               std::to_string(i) + " of the batch";
      };
      if (!t.defined() || t.is_symbolic()) invalid(where() + " is not a concrete tensor");
      if (t.dtype() != first[c].dtype()) {
        invalid(where() + " is " + dtype_name(t.dtype()) + ", in element 0 it is " +
                dtype_name(first[c].dtype()));
      }
      if (same_shapes && t.shape() != first[c].shape()) {
        invalid(where() + " has shape " + shape_str(t.shape()) + ", in element 0 it has " +
                shape_str(first[c].shape()) +
                "; padded_batch batches elements of different "
                "shapes");
      }
      if (t.rank() != first[c].rank()) {
        invalid(where() + " has rank " + std::to_string(t.rank()) + " (shape " +
                shape_str(t.shape()) + "), in element 0 it has rank " +
                std::to_string(first[c].rank()) + " (shape " + shape_str(first[c].shape()) + ")");
      }
    }
  }
}

// Component `component` of each element, stacked along a new dimension 0.
Tensor stack_components(const std::vector<Element>& elements, size_t component) {
  const Tensor& first = elements[0][component];
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(elements.size()));
  Tensor out = Tensor::empty(first.dtype(), shape);
  size_t slice = first.nbytes();
  if (slice == 0) return out;
  auto* dst = static_cast<uint8_t*>(out.raw_mutable_data());
  for (size_t i = 0; i < elements.size(); ++i) {
    std::memcpy(dst + i * slice, elements[i][component].raw_data(), slice);
  }
  return out;
}

// What a batch node makes of each group of elements: batch stacks them, ragged_batch joins them
// into values and row_splits.
using Combine = Element (*)(std::vector<Element>& elements);

Element stack_batch(std::vector<Element>& elements) {
  check_structure(elements, "batch", true);
  Element out;
  for (size_t c = 0; c < elements[0].size(); ++c) out.push_back(stack_components(elements, c));
  return out;
}

class BatchNode : public DatasetNode {
 public:
  BatchNode(NodePtr input, int64_t n, bool drop_remainder, Combine combine = stack_batch,
            const char* name = "batch")
      : input_(std::move(input)),
        n_(n),
        drop_remainder_(drop_remainder),
        combine_(combine),
        name_(name) {}
  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      std::unique_ptr<IteratorImpl> input;
      int64_t n = 1;
      bool drop_remainder = false;
      Combine combine = nullptr;
      std::optional<Element> next() override {
        if (combine == stack_batch && input && input->row_source()) return gathered();
        std::vector<Element> elements = next_group(input, n, drop_remainder);
        if (elements.empty()) return std::nullopt;
        return combine(elements);
      }
      // The rows of an in-memory source, copied once, into the batch (IteratorImpl::row_source).
      std::optional<Element> gathered() {
        runtime::ThreadPool::yield_to_tasks();  // made by a pool worker: the step's kernels first
        const DatasetNode* source = input->row_source();
        indices.clear();
        input->next_indices(n, indices);
        if (static_cast<int64_t>(indices.size()) < n && drop_remainder) indices.clear();
        if (indices.empty()) {
          input.reset();
          return std::nullopt;
        }
        return source->gather_rows(indices);
      }
      std::vector<int64_t> indices;
    };
    auto it = std::make_unique<It>();
    it->input = input_->make_iterator(epoch);
    it->n = n_;
    it->drop_remainder = drop_remainder_;
    it->combine = combine_;
    return it;
  }
  int64_t cardinality() const override { return batched_cardinality(input_->cardinality()); }
  bool waits_on_threads() const override { return input_->waits_on_threads(); }
  std::string describe() const override {
    return input_->describe() + "." + name_ + "(" + std::to_string(n_) + "," +
           (drop_remainder_ ? "true" : "false") + ")";
  }

 protected:
  int64_t batched_cardinality(int64_t c) const {
    if (c < 0) return c;
    return drop_remainder_ ? c / n_ : (c + n_ - 1) / n_;
  }
  NodePtr input_;
  int64_t n_;
  bool drop_remainder_;
  Combine combine_;
  std::string name_;
};

// Fills `out` (of padded shape `target`, for one batch position at `dst`) with `value`, then
// copies `src` into its leading corner, one innermost row at a time.
void copy_padded(const Tensor& src, const Shape& target, uint8_t* dst) {
  const Shape& shape = src.shape();
  size_t esize = dtype_size(src.dtype());
  const auto* from = static_cast<const uint8_t*>(src.raw_data());
  if (src.size() == 0) return;
  if (shape.empty()) {
    std::memcpy(dst, from, esize);
    return;
  }
  std::vector<int64_t> strides = row_major_strides(target);
  int64_t rank = static_cast<int64_t>(shape.size());
  size_t row_bytes = static_cast<size_t>(shape.back()) * esize;
  int64_t rows = src.size() / shape.back();
  std::vector<int64_t> index(static_cast<size_t>(rank - 1), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    for (int64_t d = 0; d + 1 < rank; ++d) offset += index[d] * strides[d];
    std::memcpy(dst + offset * esize, from + r * row_bytes, row_bytes);
    for (int64_t d = rank - 2; d >= 0; --d) {  // odometer over all but the last dimension
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

void fill_value(uint8_t* dst, int64_t count, DType dtype, double value) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    if constexpr (std::is_same_v<T, bool>) {
      v = value != 0;
    } else if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
      v = float_cast<T>(value);  // rounded once, not through f32
    } else {
      v = static_cast<T>(static_cast<ComputeType<T>>(value));
    }
    for (int64_t i = 0; i < count; ++i) std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
  });
}

class PaddedBatchNode : public BatchNode {
 public:
  PaddedBatchNode(NodePtr input, int64_t n, std::vector<Shape> padded_shapes,
                  std::vector<double> padding_values, bool drop_remainder)
      : BatchNode(std::move(input), n, drop_remainder),
        padded_shapes_(std::move(padded_shapes)),
        padding_values_(std::move(padding_values)) {}

  std::unique_ptr<IteratorImpl> make_iterator(int64_t epoch) const override {
    struct It : IteratorImpl {
      std::unique_ptr<IteratorImpl> input;
      int64_t n = 1;
      bool drop_remainder = false;
      std::vector<Shape> padded_shapes;
      std::vector<double> padding_values;
      std::optional<Element> next() override {
        std::vector<Element> elements = next_group(input, n, drop_remainder);
        if (elements.empty()) return std::nullopt;
        check_structure(elements, "padded_batch", false);
        size_t components = elements[0].size();
        if (!padded_shapes.empty() && padded_shapes.size() != components) {
          invalid("padded_batch: " + std::to_string(padded_shapes.size()) +
                  " padded shapes for elements of " + std::to_string(components) + " components");
        }
        if (!padding_values.empty() && padding_values.size() != components) {
          invalid("padded_batch: " + std::to_string(padding_values.size()) +
                  " padding values for elements of " + std::to_string(components) + " components");
        }
        Element out;
        for (size_t c = 0; c < components; ++c) out.push_back(pad_component(elements, c));
        return out;
      }

      Tensor pad_component(const std::vector<Element>& elements, size_t c) const {
        const Tensor& first = elements[0][c];
        Shape target =
            padded_shapes.empty() ? Shape(first.shape().size(), kUnknownDim) : padded_shapes[c];
        if (target.size() != first.shape().size()) {
          invalid("padded_batch: component " + std::to_string(c) + " has shape " +
                  shape_str(first.shape()) + " but its padded shape " + shape_str(target) +
                  " has another rank");
        }
        for (size_t d = 0; d < target.size(); ++d) {
          int64_t largest = 0;
          for (const Element& e : elements) largest = std::max(largest, e[c].shape()[d]);
          if (target[d] == kUnknownDim) {
            target[d] = largest;
          } else if (largest > target[d]) {
            for (size_t i = 0; i < elements.size(); ++i) {
              if (elements[i][c].shape()[d] > target[d]) {
                invalid("padded_batch: component " + std::to_string(c) + " of element " +
                        std::to_string(i) + " of the batch has shape " +
                        shape_str(elements[i][c].shape()) + ", larger than its padded shape " +
                        shape_str(padded_shapes[c]) + " in dimension " + std::to_string(d));
              }
            }
          }
        }
        Shape batch_shape = target;
        batch_shape.insert(batch_shape.begin(), static_cast<int64_t>(elements.size()));
        Tensor out = Tensor::empty(first.dtype(), batch_shape);
        if (out.size() == 0) return out;
        auto* dst = static_cast<uint8_t*>(out.raw_mutable_data());
        fill_value(dst, out.size(), first.dtype(), padding_values.empty() ? 0 : padding_values[c]);
        size_t slice_bytes = static_cast<size_t>(num_elements(target)) * dtype_size(first.dtype());
        for (size_t i = 0; i < elements.size(); ++i) {
          copy_padded(elements[i][c], target, dst + i * slice_bytes);
        }
        return out;
      }
    };
    auto it = std::make_unique<It>();
    it->input = input_->make_iterator(epoch);
    it->n = n_;
    it->drop_remainder = drop_remainder_;
    it->padded_shapes = padded_shapes_;
    it->padding_values = padding_values_;
    return it;
  }
  std::string describe() const override {
    std::string s = input_->describe() + ".padded_batch(" + std::to_string(n_) + ",[";
    for (const Shape& shape : padded_shapes_) s += shape_str(shape);
    s += "],[";
    for (double v : padding_values_) s += std::to_string(v) + ";";
    return s + "]," + (drop_remainder_ ? "true" : "false") + ")";
  }

 private:
  std::vector<Shape> padded_shapes_;
  std::vector<double> padding_values_;
};

// ---- ragged_batch ----

// Component c of each element concatenated along dimension 0 (values), and where each
// element's rows begin (row_splits, i64 [k + 1]): a RaggedTensor's encoding. The components
// must agree in dtype and in every dimension but the first.
void ragged_component(const std::vector<Element>& elements, size_t c, Element& out) {
  const Tensor& first = elements[0][c];
  auto where = [&](size_t i) {
    return "ragged_batch: component " + std::to_string(c) + " of element " + std::to_string(i) +
           " of the batch";
  };
  const int64_t k = static_cast<int64_t>(elements.size());
  Tensor row_splits = Tensor::empty(i64, {k + 1});
  auto* splits = static_cast<int64_t*>(row_splits.raw_mutable_data());
  splits[0] = 0;
  for (size_t i = 0; i < elements.size(); ++i) {
    const Tensor& t = elements[i][c];
    if (!t.defined() || t.is_symbolic()) invalid(where(i) + " is not a concrete tensor");
    if (t.rank() < 1) {
      invalid(where(i) +
              " is a scalar; ragged_batch joins components of rank 1 or more along "
              "their first dimension (use batch for scalars)");
    }
    if (t.dtype() != first.dtype()) {
      invalid(where(i) + " is " + dtype_name(t.dtype()) + ", in element 0 it is " +
              dtype_name(first.dtype()));
    }
    if (t.rank() != first.rank() ||
        !std::equal(t.shape().begin() + 1, t.shape().end(), first.shape().begin() + 1)) {
      invalid(where(i) + " has shape " + shape_str(t.shape()) + ", in element 0 it has shape " +
              shape_str(first.shape()) + "; only the first dimension may differ");
    }
    splits[i + 1] = splits[i] + t.dim(0);
  }
  Shape shape = first.shape();
  shape[0] = splits[k];
  Tensor values = Tensor::empty(first.dtype(), std::move(shape));
  if (values.nbytes() > 0) {
    auto* dst = static_cast<uint8_t*>(values.raw_mutable_data());
    for (const Element& e : elements) {
      const size_t n = e[c].nbytes();
      if (n) std::memcpy(dst, e[c].raw_data(), n);
      dst += n;
    }
  }
  out.push_back(std::move(values));
  out.push_back(std::move(row_splits));
}

// ragged_batch: each component becomes values and row_splits.
Element ragged_batch(std::vector<Element>& elements) {
  const size_t components = elements[0].size();
  for (size_t i = 1; i < elements.size(); ++i) {
    if (elements[i].size() != components) {
      invalid("ragged_batch: element " + std::to_string(i) + " of the batch has " +
              std::to_string(elements[i].size()) + " components, element 0 has " +
              std::to_string(components));
    }
  }
  Element out;
  out.reserve(2 * components);
  for (size_t c = 0; c < components; ++c) ragged_component(elements, c, out);
  return out;
}

}  // namespace

NodePtr make_batch_node(NodePtr input, int64_t n, bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(input), n, drop_remainder);
}

NodePtr make_ragged_batch_node(NodePtr input, int64_t n, bool drop_remainder) {
  return std::make_shared<BatchNode>(std::move(input), n, drop_remainder, ragged_batch,
                                     "ragged_batch");
}

NodePtr make_padded_batch_node(NodePtr input, int64_t n, std::vector<Shape> padded_shapes,
                               std::vector<double> padding_values, bool drop_remainder) {
  return std::make_shared<PaddedBatchNode>(std::move(input), n, std::move(padded_shapes),
                                           std::move(padding_values), drop_remainder);
}

}  // namespace kiln::data::detail

// kiln::Tensor: the one value type. Concrete (holds data, computed eagerly) or symbolic
// (a value of a node in a Graph, produced while recording).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/shape.h"

namespace kiln {

class Graph;
namespace detail {
struct TensorImpl;
struct GraphImpl;
}  // namespace detail

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor; defined() is false

  // A scalar (rank-0) tensor.
  template <class T>
  static Tensor scalar(T value) {
    return from_vector(std::vector<T>{value}, Shape{});
  }
  // Copies `values` into a new tensor of `shape` (default: a vector of values.size()).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape = {kUnknownDim}) {
    if (shape == Shape{kUnknownDim}) shape = {static_cast<int64_t>(values.size())};
    return from_bytes(dtype_of<T>, std::move(shape), values.data(), values.size() * sizeof(T));
  }
  static Tensor from_vector(const std::vector<bool>& values, Shape shape = {kUnknownDim});
  template <class T>
  static Tensor from_list(std::initializer_list<T> values, Shape shape = {kUnknownDim}) {
    return from_vector(std::vector<T>(values), std::move(shape));
  }
  // Copies nbytes from data; nbytes must equal num_elements(shape) * dtype_size(dtype).
  static Tensor from_bytes(DType dtype, Shape shape, const void* data, size_t nbytes);
  // Uninitialised storage.
  static Tensor empty(DType dtype, Shape shape);

  bool defined() const { return impl_ != nullptr; }
  bool is_symbolic() const;
  DType dtype() const;
  const Shape& shape() const;
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  int64_t dim(int64_t axis) const;  // negative axes count from the end
  int64_t size() const;             // number of elements
  size_t nbytes() const;
  // Where the bytes live: the host (cpu:0), or a GPU for a tensor moved there by to(Device) or
  // fetched from a device program that keeps its outputs there. A device tensor's bytes are
  // not on the host: data(), raw_data() and item() throw kiln::Error (kFailedPrecondition)
  // saying so; to(Device::cpu()) copies it back. Eager ops on it run on its device (each op a
  // device program compiled once per signature), their results left there; host operands are
  // copied up; operands on two devices are kInvalidArgument.
  Device device() const;

  // The value of a one-element tensor, converted to T.
  template <class T>
  T item() const {
    T out;
    item_into(dtype_of<T>, &out);
    return out;
  }
  // Typed views of the data. T must match dtype(); a symbolic tensor has no data.
  template <class T>
  std::span<const T> data() const {
    check_access(dtype_of<T>);
    return {static_cast<const T*>(raw_data()), static_cast<size_t>(size())};
  }
  // A mutable view. Tensors have value semantics: if the storage is shared with another
  // tensor, it is copied first, so no other tensor sees the writes.
  template <class T>
  std::span<T> mutable_data() {
    check_access(dtype_of<T>);
    return {static_cast<T*>(raw_mutable_data()), static_cast<size_t>(size())};
  }
  // Element values converted to T (any dtype).
  template <class T>
  std::vector<T> to_vector() const {
    Tensor converted = dtype() == dtype_of<T> ? *this : to(dtype_of<T>);
    auto d = converted.data<T>();
    return {d.begin(), d.end()};
  }
  const void* raw_data() const;
  void* raw_mutable_data();

  Tensor to(DType dtype) const;  // convert (an op: recorded when symbolic)
  // A copy on `device` (PyTorch's tensor.to(device)): up to a GPU from the host, down to the
  // host from a GPU; this tensor itself when it is already there. A concrete tensor only.
  // Throws kiln::Error: kUnavailable without a GPU (saying why), kInvalidArgument for a device
  // this machine lacks or a symbolic tensor, kUnimplemented between two GPUs or beyond cuda:0,
  // kResourceExhausted beyond the device's memory limit.
  Tensor to(const Device& device) const;

  // Symbolic tensors: the graph and "node_name:output" they refer to.
  Graph graph() const;
  std::string name() const;

  // NumPy-like rendering: tensor([[1, 2], [3, 4]], dtype=f32, shape=[2,2]).
  std::string str() const;

  // Internal.
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::TensorImpl>& impl() const { return impl_; }

 private:
  void check_access(DType requested) const;
  void item_into(DType requested, void* out) const;
  std::shared_ptr<detail::TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace kiln

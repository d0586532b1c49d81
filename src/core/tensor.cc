// Tensor creation, accessors and value semantics (copy on write of shared storage).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kiln/graph.h"
#include "src/core/device_memory.h"
#include "src/core/float16_rounding.h"
#include "src/core/host_allocator.h"
#include "src/core/tensor_impl.h"
#include "src/core/type_switch.h"

namespace kiln {
namespace detail {

Storage::Storage(size_t n) : nbytes(n) {
  data = host_allocate(std::max<size_t>(n, 1));
  if (!data) {
    throw Error(ErrorCode::kResourceExhausted,
                "out of memory: cannot allocate " + std::to_string(n) + " bytes for a tensor");
  }
}

Storage::~Storage() {
  if (!owner) host_free(data, std::max<size_t>(nbytes, 1));
}

}  // namespace detail

namespace {

const detail::TensorImpl& checked(const std::shared_ptr<detail::TensorImpl>& impl) {
  if (!impl) throw Error(ErrorCode::kFailedPrecondition, "use of an undefined tensor");
  return *impl;
}

}  // namespace

Tensor Tensor::empty(DType dtype, Shape shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "cannot create a tensor of shape " + shape_str(shape) +
                      ": dimensions must be non-negative");
    }
  }
  // The message is built only on failure: small tensors are made on every eager op.
  auto what = [&] {
    return "a tensor of shape " + shape_str(shape) + " and dtype " + dtype_name(dtype);
  };
  int64_t nbytes = static_cast<int64_t>(dtype_size(dtype));
  bool overflow = false;
  for (int64_t d : shape) overflow |= __builtin_mul_overflow(nbytes, d, &nbytes);
  if (overflow && std::find(shape.begin(), shape.end(), 0) == shape.end()) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot create " + what() + ": its size in bytes is too large for int64");
  }
  if (overflow) nbytes = 0;
  auto impl = detail::make_pooled<detail::TensorImpl>();
  impl->dtype = dtype;
  try {
    impl->storage = detail::make_pooled<detail::Storage>(static_cast<size_t>(nbytes));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kResourceExhausted) throw;
    throw Error(ErrorCode::kResourceExhausted, "out of memory: cannot allocate " +
                                                   std::to_string(nbytes) + " bytes for " + what());
  }
  impl->shape = std::move(shape);
  return Tensor(std::move(impl));
}

Tensor Tensor::from_bytes(DType dtype, Shape shape, const void* data, size_t nbytes) {
  Tensor t = empty(dtype, std::move(shape));
  if (nbytes != t.nbytes()) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot make a tensor of shape " + shape_str(t.shape()) + " from " +
                    std::to_string(nbytes / dtype_size(dtype)) + " values (it holds " +
                    std::to_string(t.size()) + ")");
  }
  if (nbytes) std::memcpy(t.impl_->storage->data, data, nbytes);
  return t;
}

Tensor Tensor::from_vector(const std::vector<bool>& values, Shape shape) {
  if (shape == Shape{kUnknownDim}) shape = {static_cast<int64_t>(values.size())};
  std::vector<uint8_t> bytes(values.begin(), values.end());
  return from_bytes(bool_, std::move(shape), bytes.data(), bytes.size());
}

bool Tensor::is_symbolic() const { return checked(impl_).graph != nullptr; }
DType Tensor::dtype() const { return checked(impl_).dtype; }
const Shape& Tensor::shape() const { return checked(impl_).shape; }
int64_t Tensor::size() const { return num_elements(shape()); }
size_t Tensor::nbytes() const { return is_symbolic() ? 0 : impl_->storage->nbytes; }
Device Tensor::device() const {
  return is_symbolic() ? Device::cpu() : impl_->storage->device;
}

int64_t Tensor::dim(int64_t axis) const {
  int64_t r = rank();
  if (axis < -r || axis >= r) {
    throw Error(ErrorCode::kInvalidArgument, "dim: axis " + std::to_string(axis) +
                                                 " is out of range for a tensor of shape " +
                                                 shape_str(shape()));
  }
  return shape()[axis < 0 ? axis + r : axis];
}

const void* Tensor::raw_data() const {
  if (is_symbolic()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "tensor '" + name() + "' is symbolic (a value in graph '" + graph().name() +
                    "'): run the graph to get its data");
  }
  if (impl_->storage->device.type != DeviceType::kCpu) {
    throw Error(ErrorCode::kFailedPrecondition,
                "tensor " + TensorType{dtype(), shape()}.str() + " is on " +
                    impl_->storage->device.str() +
                    ": its bytes are not on the host (copy it with .to(Device::cpu()))");
  }
  return impl_->storage->data;
}

namespace {

// The memory of `device`, its errors naming the call to(target).
std::shared_ptr<const detail::DeviceMemory> memory_for(const Device& device, const Device& target) {
  try {
    return detail::device_memory(device);
  } catch (const Error& e) {
    throw Error(e.code(), "to(" + target.str() + "): " + e.what());
  }
}

}  // namespace

Tensor Tensor::to(const Device& device) const {
  if (!defined() || is_symbolic()) {
    throw Error(ErrorCode::kInvalidArgument,
                "to(" + device.str() + "): a concrete tensor only (this one is " +
                    (defined() ? "symbolic" : "undefined") + ")");
  }
  const Device here = impl_->storage->device;
  if (device == here) return *this;
  if (device.type == DeviceType::kCpu) {
    if (device.index != 0)
      throw Error(ErrorCode::kInvalidArgument,
                  "to(" + device.str() + "): no such device (the host is cpu:0)");
    return detail::to_host(*this);
  }
  if (here.type != DeviceType::kCpu)
    throw Error(ErrorCode::kUnimplemented, "to(" + device.str() + "): the tensor is on " +
                                               here.str() + "; copy it through the host");
  return detail::to_device(memory_for(device, device), *this);
}

namespace detail {

namespace {

// A tensor of `dtype` and `shape` over `p` in `memory`, its storage kept by `owner`.
Tensor over_device_memory(std::shared_ptr<const DeviceMemory> memory, void* p, DType dtype,
                          Shape shape, std::shared_ptr<void> owner) {
  auto impl = make_pooled<TensorImpl>();
  impl->dtype = dtype;
  const size_t bytes = static_cast<size_t>(num_elements(shape)) * dtype_size(dtype);
  impl->shape = std::move(shape);
  impl->storage = make_pooled<Storage>(std::move(owner), p, bytes);
  impl->storage->device = memory->device();
  impl->storage->memory = std::move(memory);
  return Tensor(std::move(impl));
}

}  // namespace

Tensor device_tensor(std::shared_ptr<const DeviceMemory> memory, void* p, DType dtype,
                     Shape shape) {
  std::shared_ptr<void> owner(p, [memory](void* q) {
    try {
      memory->deallocate(q);
    } catch (...) {  // a device gone at exit: nothing more to free
    }
  });
  return over_device_memory(std::move(memory), p, dtype, std::move(shape), std::move(owner));
}

Tensor device_view(std::shared_ptr<const DeviceMemory> memory, void* p, DType dtype,
                   Shape shape) {
  // An owner that owns nothing (aliasing an empty pointer): nothing is freed, and a program
  // never takes the buffer as a donation (its owner is not held once).
  std::shared_ptr<void> none(std::shared_ptr<void>(), p);
  return over_device_memory(std::move(memory), p, dtype, std::move(shape), std::move(none));
}

Tensor to_device(const std::shared_ptr<const DeviceMemory>& memory, const Tensor& host) {
  const void* src = host.raw_data();  // a host tensor's bytes (throws for any other)
  const int64_t bytes = static_cast<int64_t>(host.nbytes());
  void* p = memory->allocate(bytes, "to(" + memory->device().str() + ") of a tensor " +
                                        TensorType{host.dtype(), host.shape()}.str());
  Tensor moved = device_tensor(memory, p, host.dtype(), host.shape());  // frees p on a throw
  if (bytes > 0) memory->upload(p, src, bytes);
  return moved;
}

Tensor to_host(const Tensor& t) {
  const Storage& s = *t.impl()->storage;
  if (!s.memory) throw Error(ErrorCode::kInternal, "to_host: not a device tensor");
  Tensor host = Tensor::empty(t.dtype(), t.shape());
  if (s.nbytes > 0)
    s.memory->download(host.raw_mutable_data(), s.data, static_cast<int64_t>(s.nbytes));
  return host;
}

const DeviceMemory* memory_of(const Tensor& t) {
  return t.defined() && !t.is_symbolic() ? t.impl()->storage->memory.get() : nullptr;
}

void* device_pointer(const Tensor& t) {
  if (!t.defined() || t.is_symbolic() || t.device().type == DeviceType::kCpu)
    throw Error(ErrorCode::kInternal, "device_pointer: not a device tensor");
  return t.impl()->storage->data;
}

}  // namespace detail

void* Tensor::raw_mutable_data() {
  raw_data();  // checks it is concrete
  if (impl_.use_count() > 1 || impl_->storage.use_count() > 1) {
    auto copy = detail::make_pooled<detail::TensorImpl>(*impl_);
    copy->storage = detail::make_pooled<detail::Storage>(impl_->storage->nbytes);
    std::memcpy(copy->storage->data, impl_->storage->data, impl_->storage->nbytes);
    impl_ = std::move(copy);
  }
  return impl_->storage->data;
}

void Tensor::check_access(DType requested) const {
  if (dtype() != requested) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("data<") + dtype_name(requested) + ">: the tensor's dtype is " +
                    dtype_name(dtype()) + "; convert it with to(" + dtype_name(requested) +
                    ") first");
  }
  raw_data();
}

void Tensor::item_into(DType requested, void* out) const {
  if (size() != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "item: the tensor has " + std::to_string(size()) + " elements (shape " +
                    shape_str(shape()) + "); item() needs exactly one");
  }
  const void* src = raw_data();
  if (requested == dtype()) {  // exact, also for 64-bit integers beyond 2^53
    std::memcpy(out, src, dtype_size(requested));
    return;
  }
  if (is_integer(requested) && is_integer(dtype())) {
    int64_t v = visit_dtype(dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return static_cast<int64_t>(*static_cast<const T*>(src));
    });
    visit_dtype(requested, [&](auto tag) {
      using T = typename decltype(tag)::type;
      *static_cast<T*>(out) = static_cast<T>(v);
    });
    return;
  }
  if (is_floating(requested) && !is_floating(dtype())) {  // exactly from the integer
    int64_t v = visit_dtype(dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return static_cast<int64_t>(*static_cast<const T*>(src));
    });
    visit_dtype(requested, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (kIsFloat<T>) *static_cast<T*>(out) = float_cast<T>(v);
    });
    return;
  }
  double v = visit_dtype(dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<double>(static_cast<ComputeType<T>>(*static_cast<const T*>(src)));
  });
  visit_dtype(requested, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      *static_cast<T*>(out) = float_cast<T>(v);  // once, not through float for half/bfloat16
    } else {
      *static_cast<T*>(out) = static_cast<T>(v);
    }
  });
}


Graph Tensor::graph() const {
  if (!is_symbolic()) {
    throw Error(ErrorCode::kFailedPrecondition, "graph(): the tensor is concrete, not symbolic");
  }
  return Graph(impl_->graph);
}

std::string Tensor::name() const {
  if (!defined()) return "<undefined>";
  if (!is_symbolic()) return "<concrete>";
  std::lock_guard lock(impl_->graph->mu);
  return impl_->graph->nodes[impl_->node].name + ":" + std::to_string(impl_->output);
}

std::string Device::str() const {
  return std::string(type == DeviceType::kCpu ? "cpu:" : "cuda:") + std::to_string(index);
}

}  // namespace kiln

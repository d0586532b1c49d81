// kiln::Ref<Base>: a shared handle that accepts any value derived from Base, so APIs read
// like Keras: Sequential({Dense(128), Dropout(0.2)}), compile(Adam(1e-3), ...).
#pragma once

#include <concepts>
#include <memory>

namespace kiln {

template <class Base>
class Ref {
 public:
  Ref() = default;
  template <class D>
    requires std::derived_from<D, Base>
  Ref(D value) : ptr_(std::make_shared<D>(std::move(value))) {}  // NOLINT: implicit by design
  template <class D>
    requires std::derived_from<D, Base>
  Ref(std::shared_ptr<D> ptr) : ptr_(std::move(ptr)) {}  // NOLINT
  const std::shared_ptr<Base>& get() const { return ptr_; }
  Base* operator->() const { return ptr_.get(); }
  Base& operator*() const { return *ptr_; }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  std::shared_ptr<Base> ptr_;
};

}  // namespace kiln

// Calls a generic lambda with a tag for the C++ type of a runtime DType:
//   visit_dtype(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
#pragma once

#include <type_traits>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln {

template <class T>
struct TypeTag {
  using type = T;
};

template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::f16: return f(TypeTag<half>{});
    case DType::bf16: return f(TypeTag<bfloat16>{});
    case DType::i8: return f(TypeTag<int8_t>{});
    case DType::u8: return f(TypeTag<uint8_t>{});
    case DType::i32: return f(TypeTag<int32_t>{});
    case DType::i64: return f(TypeTag<int64_t>{});
    case DType::bool_: return f(TypeTag<bool>{});
  }
  throw Error(ErrorCode::kInternal, "visit_dtype: invalid dtype");
}

// The type arithmetic is done in: float for the 16-bit float types, T otherwise.
template <class T>
using ComputeType =
    std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

template <class T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, half> ||
                                 std::is_same_v<T, bfloat16>;

}  // namespace kiln

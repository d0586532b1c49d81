// Checking the values fed to a graph's placeholders: shared by the reference interpreter and
// compiled executables, so both accept the same feeds and reject the others in the same words.
#pragma once

#include <string>

#include "kiln/error.h"
#include "kiln/graph.h"

namespace kiln::runtime {

// Whether `got` has `want`'s rank and every dimension `want` knows.
inline bool shape_matches(const Shape& want, const Shape& got) {
  if (want.size() != got.size()) return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != kUnknownDim && want[i] != got[i]) return false;
  return true;
}

// Checks `value`, fed to the placeholder `name` of type `want`: it must be concrete, of want's
// dtype and of a matching shape. Throws kInvalidArgument "<who>: ...".
inline void check_feed(const std::string& who, const std::string& name, const TensorType& want,
                       const Tensor& value) {
  if (!value.defined() || value.is_symbolic()) {
    throw Error(ErrorCode::kInvalidArgument,
                who + ": the value fed to placeholder '" + name + "' must be concrete");
  }
  if (value.dtype() != want.dtype || !shape_matches(want.shape, value.shape())) {
    throw Error(ErrorCode::kInvalidArgument, who + ": feed for placeholder '" + name + "' is " +
                                                 TensorType{value.dtype(), value.shape()}.str() +
                                                 ", expected " + want.str());
  }
}

}  // namespace kiln::runtime

// Helpers of the op tests: tensors from literal values, value checks with a relative
// tolerance (NaN matches NaN), and the kiln::Error (or its message) a call throws.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test_values {

// Values start, start + 1, ... in the given shape.
inline Tensor counting(Shape shape, float start = 1, DType dtype = f32) {
  std::vector<float> v(num_elements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from_vector(v, shape).to(dtype);
}

inline Tensor values(Shape shape, std::vector<double> v, DType dtype = f32) {
  return Tensor::from_vector(v, std::move(shape)).to(dtype);
}

// |got - want| <= tol * (1 + |want|) at every index; a NaN wanted must be a NaN got.
inline void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& want,
                          double tol = 1e-5) {
  ASSERT_EQ(t.shape(), shape);
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at flat index " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at flat index " << i;
  }
}

// The message of the kiln::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The kiln::Error that f throws (a test failure, and an kInternal error, if it throws none).
inline Error thrown_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a kiln::Error";
  return Error(ErrorCode::kInternal, "<no error thrown>");
}

// f throws a kiln::Error with `code` whose message contains `says`.
inline void expect_error(const std::function<void()>& f, ErrorCode code, const std::string& says) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying: " << says;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos)
        << "the error '" << e.what() << "' does not say '" << says << "'";
  }
}

}  // namespace kiln::test_values

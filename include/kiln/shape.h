// Shapes: a list of dimension sizes; kUnknownDim marks a dimension only known at run time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
inline constexpr int64_t kUnknownDim = -1;

// Product of the dimensions; kUnknownDim if any dimension is unknown.
int64_t num_elements(const Shape& shape);
bool is_fully_defined(const Shape& shape);
// "[2,3]", with "?" for unknown dimensions.
std::string shape_str(const Shape& shape);
// Row-major strides in elements.
std::vector<int64_t> row_major_strides(const Shape& shape);

}  // namespace kiln

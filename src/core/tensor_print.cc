// NumPy-like rendering of tensors: nested brackets, aligned columns, and "..." eliding the
// middle of large tensors (more than 1000 elements show 3 items at each edge).
#include <cmath>
#include <cstdio>
#include <ostream>

#include "kiln/graph.h"
#include "src/core/tensor_impl.h"
#include "src/core/type_switch.h"

namespace kiln {
namespace {

constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype) {
  if (dtype == bool_) return v != 0 ? "true" : "false";
  if (!is_floating(dtype)) return std::to_string(static_cast<int64_t>(v));
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".";
  return s;
}

struct Printer {
  const Shape& shape;
  std::vector<std::string> cells;  // row-major, every element formatted
  std::vector<int64_t> strides;
  bool summarise;
  size_t width = 0;

  void print(std::string& out, int axis, int64_t offset, int indent) const {
    if (axis == static_cast<int>(shape.size())) {
      std::string cell = cells[offset];
      out += std::string(width - cell.size(), ' ') + cell;
      return;
    }
    out += "[";
    int64_t n = shape[axis];
    bool last = axis + 1 == static_cast<int>(shape.size());
    for (int64_t i = 0; i < n; ++i) {
      if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
        out += last ? "..., " : "...,\n" + std::string(indent + 1, ' ');
        i = n - kEdgeItems - 1;
        continue;
      }
      print(out, axis + 1, offset + i * strides[axis], indent + 1);
      if (i + 1 < n) {
        if (last) {
          out += ", ";
        } else {
          out += ",";
          out += std::string(shape.size() - axis - 1, '\n');
          out += std::string(indent + 1, ' ');
        }
      }
    }
    out += "]";
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(<undefined>)";
  std::string suffix = std::string("dtype=") + dtype_name(dtype());
  if (is_symbolic()) {
    return "tensor(<symbolic " + name() + ">, " + suffix + ", shape=" + shape_str(shape()) + ")";
  }
  if (device().type != DeviceType::kCpu) {
    return "tensor(<on " + device().str() + ">, " + suffix + ", shape=" + shape_str(shape()) +
           ")";
  }
  std::vector<double> values(size());
  const void* src = raw_data();
  visit_dtype(dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(src);
    for (int64_t i = 0; i < size(); ++i)
      values[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
  });
  Printer printer{shape(), {}, row_major_strides(shape()), size() > kSummariseAbove};
  printer.cells.reserve(values.size());
  for (double v : values) {
    printer.cells.push_back(format_value(v, dtype()));
    printer.width = std::max(printer.width, printer.cells.back().size());
  }
  std::string out = "tensor(";
  if (rank() == 0) {
    out += printer.cells.at(0);
  } else if (size() == 0) {
    out += "[]";
    suffix += ", shape=" + shape_str(shape());
  } else {
    printer.print(out, 0, 0, static_cast<int>(std::string("tensor(").size()));
    if (printer.summarise) suffix += ", shape=" + shape_str(shape());
  }
  return out + ", " + suffix + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln

// A custom op for the export tests, registered both by the test that saves a model using it and
// by the separate program that loads that model: export_test_affine(x) = sign * scale * x + shift,
// with attributes of every AttrValue kind (the extra ones are checked, so a value that does not
// survive the round trip fails the kernel). Include from one translation unit per program.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace export_test {

inline void check_attrs(const kiln::Attrs& a, const std::function<void(std::string)>& fail) {
  if (a.get_int("repeat") != 3) fail("repeat must be 3");
  if (a.get_string("mode") != "affine\x01\xff") fail("mode must be \"affine\\x01\\xff\"");
  if (a.get_dtype("out_dtype") != kiln::f32) fail("out_dtype must be f32");
  if (a.get_ints("perm") != std::vector<int64_t>{1, 0, -7}) fail("perm must be [1, 0, -7]");
  if (a.get_floats("weights") != std::vector<double>{0.5, -1e300}) fail("weights mismatch");
  if (!a.get_ints("empty").empty()) fail("empty must be empty");
  a.get_bool("negate");
  a.get_float("scale");
}

// Non-differentiable: the test model applies it to its input, before any weight.
KILN_REGISTER_OP(export_test_affine)
    .input("x")
    .non_differentiable()
    .shape_fn([](const kiln::InferContext& ctx) {
      check_attrs(ctx.attrs(), [&](const std::string& m) { ctx.fail(m); });
      const kiln::Tensor& shift = ctx.attrs().get_tensor("shift");
      const kiln::TensorType& x = ctx.input(0);
      if (x.dtype != kiln::f32 || x.shape.empty() || shift.dtype() != kiln::f32 ||
          shift.shape() != kiln::Shape{x.shape.back()}) {
        ctx.fail("x must be f32[..., n] and shift f32[n], got " + x.str());
      }
      return std::vector<kiln::TensorType>{x};
    });

KILN_REGISTER_KERNEL(export_test_affine).dtypes({kiln::f32}).fn([](kiln::KernelContext& ctx) {
  const kiln::Attrs& a = ctx.attrs();
  const float k = static_cast<float>(a.get_float("scale")) * (a.get_bool("negate") ? -1.f : 1.f);
  auto shift = a.get_tensor("shift").data<float>();
  auto x = ctx.input(0).data<float>();
  auto y = ctx.allocate_output(0).mutable_data<float>();
  for (size_t i = 0; i < x.size(); ++i) y[i] = k * x[i] + shift[i % shift.size()];
});

inline kiln::Attrs attrs(const kiln::Tensor& shift) {
  return {{"scale", 1.5},
          {"negate", true},
          {"repeat", int64_t{3}},
          {"mode", std::string("affine\x01\xff")},
          {"out_dtype", kiln::f32},
          {"perm", std::vector<int64_t>{1, 0, -7}},
          {"weights", std::vector<double>{0.5, -1e300}},
          {"empty", std::vector<int64_t>{}},
          {"shift", shift}};
}

}  // namespace export_test

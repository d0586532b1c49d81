// Dtype policies (Keras' mixed precision): the dtype a layer keeps its variables in and the
// one it computes in. "float32" (the default), "mixed_bfloat16" and "mixed_float16".
#pragma once

#include <string>

#include "kiln/dtype.h"

namespace kiln::nn {

// A layer under a mixed policy keeps f32 variables, reads them cast to the compute dtype, and
// casts its f32 (and f16/bf16) inputs to the compute dtype; see docs/mixed_precision.md.
class Policy {
 public:
  // "float32", "mixed_bfloat16" or "mixed_float16"; another name throws kInvalidArgument.
  Policy(const std::string& name = "float32");  // NOLINT: implicit, as Keras takes a string
  Policy(const char* name) : Policy(std::string(name)) {}  // NOLINT
  const std::string& name() const { return name_; }
  DType compute_dtype() const { return compute_; }
  DType variable_dtype() const { return f32; }
  // compute_dtype() differs from variable_dtype().
  bool mixed() const { return compute_ != f32; }
  bool operator==(const Policy& other) const { return name_ == other.name_; }

 private:
  std::string name_;
  DType compute_;
};

// The policy layers made from now on take (Keras' mixed_precision.set_global_policy); a layer
// keeps the one it was made with. Process-wide.
void set_global_policy(const Policy& policy);
const Policy& global_policy();

}  // namespace kiln::nn

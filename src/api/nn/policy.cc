// Dtype policies: the three Keras names and the global policy new layers take.
#include "kiln/nn/policy.h"

#include <atomic>

#include "kiln/error.h"

namespace kiln::nn {

Policy::Policy(const std::string& name) : name_(name) {
  if (name == "float32") {
    compute_ = f32;
  } else if (name == "mixed_bfloat16") {
    compute_ = bf16;
  } else if (name == "mixed_float16") {
    compute_ = f16;
  } else {
    throw Error(ErrorCode::kInvalidArgument,
                "dtype policy '" + name +
                    "' is not one of \"float32\", \"mixed_bfloat16\", \"mixed_float16\"");
  }
}

namespace {
// Process-wide, as Keras' is; an index so that readers on other threads never see a torn value.
const Policy kPolicies[] = {Policy("float32"), Policy("mixed_bfloat16"), Policy("mixed_float16")};
std::atomic<int> global_index{0};
}  // namespace

void set_global_policy(const Policy& policy) {
  for (int i = 0; i < 3; ++i)
    if (kPolicies[i] == policy) global_index = i;
}
const Policy& global_policy() { return kPolicies[global_index.load()]; }

}  // namespace kiln::nn

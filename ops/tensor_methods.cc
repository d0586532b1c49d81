// The Tensor methods that run ops (declared in kiln/tensor.h): defined in the ops layer, which
// the core layer holding the rest of Tensor must not include.
#include "kiln/ops.h"
#include "kiln/tensor.h"

namespace kiln {

Tensor Tensor::to(DType dtype) const { return convert(*this, dtype); }

}  // namespace kiln

// The fused kernels' epilogue (compiler/cpu/epilogue.h): the shape-function checks fused_dot
// and fused_conv share.
#include "compiler/cpu/epilogue.h"

#include <algorithm>

#include "runtime/thread_pool.h"
#include "src/core/cpu_isa.h"

namespace kiln::compiler {

void check_epilogue(const InferContext& ctx, const TensorType& out, int bias_input,
                    bool allow_full_bias) {
  if (out.dtype != f32 && out.dtype != f64 && out.dtype != bf16 && out.dtype != f16) {
    ctx.fail("needs f32, f64, bf16 or f16 operands, got " + out.str());
  }
  if (!ctx.attrs().has("activation") ||
      !activation_from_name(ctx.attrs().get_string("activation"))) {
    ctx.fail("attribute 'activation' must be one of none, relu, tanh, logistic");
  }
  if (ctx.num_inputs() > bias_input) {
    std::string why = bias_refusal(ctx.input(bias_input), out, allow_full_bias);
    if (!why.empty()) ctx.fail(why + " (output " + out.str() + ")");
  }
}

namespace {

template <class T>
void add_bias(const Epilogue<T>& e, T* row, int64_t r, int64_t n) {
  switch (e.kind) {
    case BiasKind::kScalar: {
      const T s = e.bias[0];
      for (int64_t j = 0; j < n; ++j) row[j] = row[j] + s;
      break;
    }
    case BiasKind::kVector:
      if (e.bias_len == n) {
        for (int64_t j = 0; j < n; ++j) row[j] = row[j] + e.bias[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] = row[j] + e.bias[j % e.bias_len];
      }
      break;
    case BiasKind::kFull: {
      const T* b = e.bias + r * n;
      for (int64_t j = 0; j < n; ++j) row[j] = row[j] + b[j];
      break;
    }
  }
}

}  // namespace

template <class T>
void Epilogue<T>::apply(T* c, int64_t row0, int64_t rows, int64_t n) const {
  cpu::dispatch([&] {
    for (int64_t i = 0; i < rows; ++i) {
      T* row = c + i * n;
      if (bias != nullptr) add_bias(*this, row, row0 + i, n);
      switch (act) {
        case Activation::kNone:
          break;
        case Activation::kRelu:
          for (int64_t j = 0; j < n; ++j) row[j] = row[j] <= T(0) ? T(0) : row[j];  // as relu
          break;
        case Activation::kTanh:
          for (int64_t j = 0; j < n; ++j) row[j] = tanh_of(row[j]);
          break;
        case Activation::kLogistic:
          for (int64_t j = 0; j < n; ++j) row[j] = logistic_of(row[j]);
          break;
      }
    }
  });
}

template struct Epilogue<float>;
template struct Epilogue<double>;

template <class T>
void apply_epilogue_pass(const Epilogue<T>& e, T* y, int64_t size, int64_t n) {
  const int64_t rows = n == 0 ? 0 : size / n;
  runtime::parallel_for(rows, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, n)),
                        [&](int64_t b, int64_t end) { e.apply(y + b * n, b, end - b, n); });
}

template void apply_epilogue_pass<float>(const Epilogue<float>&, float*, int64_t, int64_t);
template void apply_epilogue_pass<double>(const Epilogue<double>&, double*, int64_t, int64_t);

}  // namespace kiln::compiler

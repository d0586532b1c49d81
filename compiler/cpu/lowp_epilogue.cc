// The bf16/f16 epilogue helpers of the fused kernels (compiler/cpu/lowp_epilogue.h).
#include "compiler/cpu/lowp_epilogue.h"

#include <algorithm>

#include "runtime/thread_pool.h"

namespace kiln::compiler {

template <class T>
void apply_rounded_epilogue(const Epilogue<T>& e, const T* d, T* y, int64_t size) {
  const int64_t n = e.bias_len, rows = n == 0 ? 0 : size / n;
  auto bias = [&](int64_t r, int64_t j) -> float {
    if (e.kind == BiasKind::kScalar) return e.bias[0];
    return e.kind == BiasKind::kFull ? e.bias[r * n + j] : e.bias[j];
  };
  auto run_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        float x = d[r * n + j];
        if (e.bias != nullptr) x = T(x + bias(r, j));  // as add rounds
        if (e.act == Activation::kRelu) x = x <= 0.0f ? 0.0f : x;
        if (e.act == Activation::kTanh) x = tanh_of(x);
        if (e.act == Activation::kLogistic) x = logistic_of(x);
        y[r * n + j] = T(x);
      }
    }
  };
  runtime::parallel_for(rows, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, n)), run_rows);
}

template void apply_rounded_epilogue<bfloat16>(const Epilogue<bfloat16>&, const bfloat16*,
                                               bfloat16*, int64_t);
template void apply_rounded_epilogue<half>(const Epilogue<half>&, const half*, half*, int64_t);

template <class T>
Epilogue<float> widened_epilogue(const Epilogue<T>& e, int64_t bias_size,
                                 std::vector<float>* storage) {
  Epilogue<float> w;
  w.kind = e.kind;
  w.bias_len = e.bias_len;
  w.act = e.act;
  if (e.bias == nullptr) return w;
  storage->assign(e.bias, e.bias + bias_size);
  w.bias = storage->data();
  return w;
}

template Epilogue<float> widened_epilogue<bfloat16>(const Epilogue<bfloat16>&, int64_t,
                                                    std::vector<float>*);
template Epilogue<float> widened_epilogue<half>(const Epilogue<half>&, int64_t,
                                                std::vector<float>*);

ops::onednn::Activation onednn_activation(Activation a) {
  using ops::onednn::Activation;
  switch (a) {
    case compiler::Activation::kNone:
      return Activation::kNone;
    case compiler::Activation::kRelu:
      return Activation::kRelu;
    case compiler::Activation::kTanh:
      return Activation::kTanh;
    case compiler::Activation::kLogistic:
      return Activation::kLogistic;
  }
  return Activation::kNone;
}

}  // namespace kiln::compiler

// libkiln_cuda.so (runtime/cuda/cuda_plugin.h): cuBLASLt matmuls with bias and activation
// epilogues, each shape's algorithm chosen once by cuBLASLt's heuristic and kept; its
// convolutions are cudnn_ops.cc's (when built with cuDNN).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "runtime/cuda/plugin/plugin.h"

namespace kiln::runtime::cuda::plugin_impl {

int fail(char* err, size_t len, const std::string& why) {
  if (len > 0) std::snprintf(err, len, "%s", why.c_str());
  return 1;
}

}  // namespace kiln::runtime::cuda::plugin_impl

namespace {

namespace plugin = kiln::runtime::cuda::plugin;
using kiln::runtime::cuda::plugin_impl::fail;

std::string lt_error(const char* what, cublasStatus_t s) {
  return std::string(what) + ": cuBLASLt status " + std::to_string(static_cast<int>(s));
}

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct State {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  // dtype, batch, m, n, k, transposes, activation, bias, the operands' alignment
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int, int, int, bool, uint32_t>;
  std::map<Key, cublasLtMatmulAlgo_t> algos;
  int64_t chosen = 0;
};

State& state() {
  static State* s = new State;  // never destroyed: the driver may be gone at exit
  return *s;
}

// The alignment of a device address, up to the 256 bytes cuBLASLt's heuristic assumes unless
// told otherwise (operands inside a program's arena are only 64-byte aligned).
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

cudaDataType_t cuda_type(int dtype) {
  switch (dtype) {
    case plugin::kF16: return CUDA_R_16F;
    case plugin::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// Owns cuBLASLt descriptors for one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The handle, created by the first call (s.mu held); "" or why not.
std::string create_handle(State& s) {
  if (s.handle != nullptr) return "";
  if (cublasStatus_t st = cublasLtCreate(&s.handle); st != CUBLAS_STATUS_SUCCESS) {
    s.handle = nullptr;
    return lt_error("cublasLtCreate", st);
  }
  return "";
}

int matmul(const plugin::Matmul* m, char* err, size_t len) {
  if (m->m < 0 || m->n < 0 || m->k < 0 || m->batch < 1 || m->batch > INT32_MAX)
    return fail(err, len, "matmul: a dimension out of range");
  if (m->dtype < plugin::kF32 || m->dtype > plugin::kBF16)
    return fail(err, len, "matmul: dtype code " + std::to_string(m->dtype));
  if (m->activation != plugin::kNone && m->activation != plugin::kRelu)
    return fail(err, len, "matmul: activation code " + std::to_string(m->activation));
  if (m->m == 0 || m->n == 0) return 0;
  // An empty sum: cuBLASLt takes no matrix of k = 0, and C is the caller's (act(bias) or 0).
  if (m->k == 0) return fail(err, len, "matmul: k = 0 (an empty sum: the caller fills C)");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (std::string why = create_handle(s); !why.empty()) return fail(err, len, why);
  if (s.workspace == nullptr) {
    if (cudaError_t e = cudaMalloc(&s.workspace, kWorkspaceBytes); e != cudaSuccess) {
      s.workspace = nullptr;  // asked again next time
      return fail(err, len, std::string("matmul workspace: ") + cudaGetErrorString(e));
    }
  }
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLASLt's A is our B (n x k, column-major
  // with leading dimension n), its B our A; the bias (one per column of C) is per row of C^T.
  const cudaDataType_t t = cuda_type(m->dtype);
  Descs d;
  cublasStatus_t st = cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return fail(err, len, lt_error("cublasLtMatmulDescCreate", st));
  cublasOperation_t ta = m->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A: our B
  cublasOperation_t tb = m->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (m->bias) epi = m->activation == plugin::kRelu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else if (m->activation == plugin::kRelu) epi = CUBLASLT_EPILOGUE_RELU;
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (m->bias)
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &m->bias,
                                   sizeof m->bias);
  // Column-major shapes as stored: our B is [k, n] row-major = n x k column-major (ld n), or
  // [n, k] row-major = k x n (ld k) when transposed.
  const uint64_t a_rows = m->trans_b ? m->k : m->n, a_cols = m->trans_b ? m->n : m->k;
  const uint64_t b_rows = m->trans_a ? m->m : m->k, b_cols = m->trans_a ? m->k : m->m;
  if ((st = cublasLtMatrixLayoutCreate(&d.a, t, a_rows, a_cols, a_rows)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&d.b, t, b_rows, b_cols, b_rows)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&d.c, t, m->n, m->m, m->n)) != CUBLAS_STATUS_SUCCESS)
    return fail(err, len, lt_error("cublasLtMatrixLayoutCreate", st));
  if (m->batch > 1) {  // strided batches: each operand's matrices one after another
    const int32_t count = static_cast<int32_t>(m->batch);
    const int64_t strides[3] = {static_cast<int64_t>(a_rows * a_cols),
                                static_cast<int64_t>(b_rows * b_cols), m->m * m->n};
    cublasLtMatrixLayout_t layouts[3] = {d.a, d.b, d.c};
    for (int i = 0; i < 3; ++i) {
      if ((st = cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                 &count, sizeof count)) != CUBLAS_STATUS_SUCCESS ||
          (st = cublasLtMatrixLayoutSetAttribute(
               layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
               sizeof strides[i])) != CUBLAS_STATUS_SUCCESS)
        return fail(err, len, lt_error("cublasLtMatrixLayoutSetAttribute", st));
    }
  }
  uint32_t align = std::min(alignment_of(m->a), std::min(alignment_of(m->b), alignment_of(m->c)));
  if (m->bias) align = std::min(align, alignment_of(m->bias));
  const State::Key key{m->dtype,   m->batch,     m->m,
                       m->n,       m->k,         m->trans_a,
                       m->trans_b, m->activation, m->bias != nullptr,
                       align};
  auto it = s.algos.find(key);
  if (it == s.algos.end()) {
    cublasLtMatmulPreferenceCreate(&d.pref);
    size_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    for (cublasLtMatmulPreferenceAttributes_t attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &align, sizeof align);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(s.handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &result,
                                        &found);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
      return fail(err, len, lt_error("cublasLtMatmulAlgoGetHeuristic (no algorithm)", st));
    it = s.algos.emplace(key, result.algo).first;
    ++s.chosen;
  }
  const float alpha = 1.0f, beta = 0.0f;
  st = cublasLtMatmul(s.handle, d.op, &alpha, m->b, d.a, m->a, d.b, &beta, m->c, d.c, m->c, d.c,
                      &it->second, s.workspace, kWorkspaceBytes,
                      static_cast<cudaStream_t>(m->stream));
  if (st != CUBLAS_STATUS_SUCCESS) return fail(err, len, lt_error("cublasLtMatmul", st));
  return 0;
}

struct TransformDescs {
  cublasLtMatrixTransformDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, c = nullptr;
  ~TransformDescs() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatrixTransformDescDestroy(op);
  }
};

int synchronize(char* err, size_t len) {
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
    return fail(err, len, std::string("cudaDeviceSynchronize: ") + cudaGetErrorString(e));
  return 0;
}

int64_t algorithms_chosen() {
  int64_t chosen = 0;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    chosen = state().chosen;
  }
#ifdef KILN_HAVE_CUDNN
  chosen += kiln::runtime::cuda::plugin_impl::conv_algorithms_chosen();
#endif
  return chosen;
}

}  // namespace

namespace kiln::runtime::cuda::plugin_impl {

std::string transpose(int dtype, int64_t rows, int64_t cols, const void* src, void* dst,
                      void* stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (std::string why = create_handle(s); !why.empty()) return why;
  // Row-major src [rows, cols] is column-major cols x rows (ld cols); its transpose, row-major
  // [cols, rows], is column-major rows x cols (ld rows).
  const cudaDataType_t t = cuda_type(dtype);
  TransformDescs d;
  cublasStatus_t st = cublasLtMatrixTransformDescCreate(&d.op, CUDA_R_32F);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_error("cublasLtMatrixTransformDescCreate", st);
  const cublasOperation_t trans = CUBLAS_OP_T;
  st = cublasLtMatrixTransformDescSetAttribute(d.op, CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSA,
                                               &trans, sizeof trans);
  if (st != CUBLAS_STATUS_SUCCESS) return lt_error("cublasLtMatrixTransformDescSetAttribute", st);
  const uint64_t r = static_cast<uint64_t>(rows), c = static_cast<uint64_t>(cols);
  if ((st = cublasLtMatrixLayoutCreate(&d.a, t, c, r, c)) != CUBLAS_STATUS_SUCCESS ||
      (st = cublasLtMatrixLayoutCreate(&d.c, t, r, c, r)) != CUBLAS_STATUS_SUCCESS)
    return lt_error("cublasLtMatrixLayoutCreate", st);
  const float one = 1.0f, zero = 0.0f;
  // No B (beta 0), as NVIDIA's samples call it: dst's old bytes (scratch, maybe NaN
  // patterns) are never read.
  st = cublasLtMatrixTransform(s.handle, d.op, &one, src, d.a, &zero, nullptr, nullptr, dst, d.c,
                               static_cast<cudaStream_t>(stream));
  return st == CUBLAS_STATUS_SUCCESS ? "" : lt_error("cublasLtMatrixTransform", st);
}

}  // namespace kiln::runtime::cuda::plugin_impl

extern "C" __attribute__((visibility("default"))) const plugin::Api* kiln_cuda_plugin() {
  static const plugin::Api api = [] {
    plugin::Api a;
    a.abi_version = plugin::kAbiVersion;
    a.matmul = matmul;
    a.synchronize = synchronize;
    a.algorithms_chosen = algorithms_chosen;
#ifdef KILN_HAVE_CUDNN
    a.conv_workspace = kiln::runtime::cuda::plugin_impl::conv_workspace;
    a.conv = kiln::runtime::cuda::plugin_impl::conv;
    a.pool = kiln::runtime::cuda::plugin_impl::pool;
#endif
    return a;
  }();
  return &api;
}

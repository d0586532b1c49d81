// The dot kernel's GEMMs through oneDNN: bf16 and f16 on the CPU's low-precision units, and f32
// blocks on its sgemm (ops/onednn_matmul.cc), or stubs that always decline when Kiln is built
// without oneDNN (ops/onednn_none.cc, chosen by CMake). ops/linalg.cc tries the low-precision
// path first and widens to f32 when it declines. One switch for all oneDNN kernels
// (ops/onednn_conv.h: KILN_ONEDNN=0).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/op_registry.h"
#include "ops/onednn_conv.h"

namespace kiln::ops::onednn {

// `batch` GEMMs C = A B of one low-precision dtype (bf16 or f16). Each A is [m, k] row-major, or
// when a_transposed stored as its transpose [k, m]; each B is [k, n], or stored [n, k]; each C
// is [m, n]; the matrices of a batch follow each other. Products are summed in f32 and each
// result is rounded once to the dtype, as the widening kernel does; oneDNN's bf16 instructions
// (vdpbf16ps, AMX) also flush subnormal inputs and partial sums to zero.
struct MatmulShape {
  int64_t batch = 0, m = 0, k = 0, n = 0;
  bool a_transposed = false, b_transposed = false;
  DType dtype = DType::bf16;
};

// Whether matmul() tries oneDNN for `dtype`: enabled (ops/onednn_conv.h) and the host, as oneDNN
// sees it (ONEDNN_MAX_CPU_ISA included), has a unit for the type. Cheap: the dot kernel asks
// before laying its operands out for oneDNN.
bool lowp_matmul_supported(DType dtype);

// Runs the GEMMs (and `epilogue`, when given, in the same kernel: a bias row of n values of the
// matmul's dtype, the same for every output row, and the activation, applied to each f32 result
// before its one rounding as ops/onednn_conv.h's BiasActivation says) and returns true, or
// returns false without touching c when oneDNN is not supported or enabled for the dtype, or
// offers only its reference implementation for the case. A failure inside oneDNN is reported
// through ctx.fail (a kiln::Error naming the op and shapes).
bool matmul(const KernelContext& ctx, const MatmulShape& s, const void* a, const void* b, void* c,
            const BiasActivation* epilogue = nullptr);

// An f32 block C = op(A) op(B) of `rows` x n (row stride ldc), run by oneDNN's sgemm on the
// calling thread alone: A is `rows` x k (or stored transposed, k x rows) with row stride lda, B is
// k x n (or stored n x k) with row stride ldb. Returns false without touching c when oneDNN is not
// enabled, or the block is narrower than kSgemmMinColumns (where Eigen measured as fast).
// Measured single-threaded on the MLP's GEMMs (Zen 4): 1.3-1.5x Eigen's gebp kernel.
constexpr int64_t kSgemmMinColumns = 16;
bool sgemm_block(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                 int64_t rows, int64_t k, int64_t n, bool a_transposed, bool b_transposed);
// How many f32 blocks sgemm_block has served in this process.
int64_t sgemm_count();

// The ISA oneDNN dispatches to on this host ("avx512_core_bf16", "avx512_core_amx", ...), or
// "none" without oneDNN.
std::string cpu_isa();

// Which path a dense [2048, 2048] x [2048, 2048] matmul of `dtype` takes here, for tests and
// benchmarks to print: "onednn <implementation> (isa <cpu_isa()>)", e.g.
// "onednn brg:avx512_core_bf16 (isa avx512_core_bf16)", or "widen to f32: <why>".
std::string matmul_path(DType dtype);

// How many dot kernels oneDNN has served in this process: tests read it to say which path ran.
int64_t matmul_count();
// How many of them applied an epilogue (a bias or an activation) in the same kernel.
int64_t fused_matmul_count();

}  // namespace kiln::ops::onednn

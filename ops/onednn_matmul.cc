// oneDNN's bf16 (and, where it has one, f16) matmul behind ops/onednn_matmul.h. The output rows
// are cut into one block per pool thread, each run by a single-threaded primitive on Kiln's pool
// as the convolutions are (ops/onednn_conv.cc), so oneDNN's OpenMP team never competes with the
// pool; primitives are cached per block shape.
#include "ops/onednn_matmul.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/onednn_conv.h"
#include "ops/onednn_util.h"
#include "runtime/thread_pool.h"

namespace kiln::ops::onednn {
namespace {

using dnnl::memory;
using Dims = memory::dims;

std::atomic<int64_t> g_matmuls{0};
std::atomic<int64_t> g_fused_matmuls{0};  // those with an epilogue
std::atomic<int64_t> g_sgemms{0};

const char* type_name(DType t) { return t == DType::bf16 ? "bf16" : "f16"; }

// A unit for the type: bf16's (ops/onednn_util.h). oneDNN 2.6 names no f16 ISA: an f16 matmul
// is tried and taken only if oneDNN offers more than its reference implementation (it offers none
// on CPUs in 2.6).
bool has_unit(DType t) { return t == DType::f16 || (t == DType::bf16 && has_bf16_unit()); }

// The parts of a BiasActivation that shape a primitive (not the bias's address).
struct EpilogueKind {
  bool bias = false;
  Activation activation = Activation::kNone;
};

EpilogueKind kind_of(const BiasActivation* e) {
  if (e == nullptr) return {};
  return {e->bias != nullptr, e->activation};
}

// One block of `rows` output rows: rows of A (columns of its stored transpose), all of B.
struct Entry {
  bool ok = false;   // false: the caller's kernel runs
  std::string impl;  // oneDNN's implementation name ("brg:avx512_core_bf16"), "" if none
  dnnl::matmul prim;
  memory::desc a, b, c, bias, scratch;
};

Entry make_entry(const MatmulShape& s, int64_t rows, const EpilogueKind& ek) {
  Entry e;
  const auto t = s.dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f16;
  e.a = memory::desc({rows, s.k}, t, s.a_transposed ? Dims{1, s.m} : Dims{s.k, 1});
  e.b = memory::desc({s.k, s.n}, t, s.b_transposed ? Dims{1, s.k} : Dims{s.n, 1});
  e.c = memory::desc({rows, s.n}, t, Dims{s.n, 1});
  if (ek.bias) e.bias = memory::desc({1, s.n}, t, Dims{s.n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per call: blocks run concurrently
  add_post_op(ek.activation, attr);  // relu: relu_keeping_nan on each block afterwards
  try {
    OmpThreads omp(1);  // oneDNN sizes a primitive's parallel regions when it is made
    const auto desc =
        ek.bias ? dnnl::matmul::desc(e.a, e.b, e.bias, e.c) : dnnl::matmul::desc(e.a, e.b, e.c);
    const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    e.impl = pd.impl_info_str();
    if (e.impl.rfind("ref", 0) == 0) return e;  // scalar loops: slower than widening
    e.prim = dnnl::matmul(pd);
    e.scratch = pd.scratchpad_desc();
    e.ok = true;
  } catch (const dnnl::error&) {
    e.ok = false;  // no implementation for the type or layout here
  }
  return e;
}

// The entry for one block shape, made on first use. A training step repeats its shapes; the
// bound only keeps a process that sweeps shapes finite.
std::shared_ptr<const Entry> entry(const MatmulShape& s, int64_t rows,
                                   const EpilogueKind& ek = {}) {
  static std::mutex mu;
  static std::map<std::vector<int64_t>, std::shared_ptr<const Entry>> cache;
  constexpr size_t kMaxEntries = 256;
  std::vector<int64_t> key = {static_cast<int64_t>(s.dtype),
                              rows,
                              s.m,
                              s.k,
                              s.n,
                              s.a_transposed,
                              s.b_transposed,
                              ek.bias,
                              static_cast<int64_t>(ek.activation)};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto made = std::make_shared<const Entry>(make_entry(s, rows, ek));  // outside the lock: ms
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxEntries) cache.clear();
  return cache.emplace(std::move(key), std::move(made)).first->second;
}

// With fewer GEMMs than pool threads, each GEMM's rows are cut into one block per thread (at
// least 16 rows: every block reads all of B); otherwise a block is a whole GEMM.
int64_t block_rows(const MatmulShape& s) {
  constexpr int64_t kMinRows = 16;
  const int64_t threads = runtime::ThreadPool::global().num_threads();
  if (s.batch >= threads) return s.m;
  const int64_t per_gemm = (threads + s.batch - 1) / s.batch;
  const int64_t rows = std::max(kMinRows, (s.m + per_gemm - 1) / per_gemm);
  return std::min(s.m, (rows + kMinRows - 1) / kMinRows * kMinRows);
}

bool supported_here(DType t) {
  auto probe = [](DType t) {
    return has_unit(t) && entry({1, 64, 64, 64, false, false, t}, 64)->ok;
  };
  static const bool bf16_ok = probe(DType::bf16), f16_ok = probe(DType::f16);
  return t == DType::bf16 ? bf16_ok : t == DType::f16 ? f16_ok : false;
}

std::string shape_text(const MatmulShape& s) {
  auto dims = [](int64_t x, int64_t y) {
    std::string t = "[";
    t += std::to_string(x);
    t += ",";
    t += std::to_string(y);
    t += "]";
    return t;
  };
  return std::string(type_name(s.dtype)) + " " + std::to_string(s.batch) + " x " +
         (s.a_transposed ? "a stored " + dims(s.k, s.m) : "a " + dims(s.m, s.k)) + " times " +
         (s.b_transposed ? "b stored " + dims(s.n, s.k) : "b " + dims(s.k, s.n));
}

}  // namespace

bool lowp_matmul_supported(DType dtype) { return enabled() && supported_here(dtype); }

bool matmul(const KernelContext& ctx, const MatmulShape& s, const void* a, const void* b, void* c,
            const BiasActivation* epilogue) {
  if (!lowp_matmul_supported(s.dtype)) return false;
  if (s.batch <= 0 || s.m <= 0 || s.k <= 0 || s.n <= 0) return false;  // nothing to multiply
  const EpilogueKind ek = kind_of(epilogue);
  const int64_t rows = block_rows(s), blocks = (s.m + rows - 1) / rows;
  const int64_t tail_rows = s.m - (blocks - 1) * rows;
  const std::shared_ptr<const Entry> full = entry(s, rows, ek);
  const std::shared_ptr<const Entry> tail = tail_rows == rows ? full : entry(s, tail_rows, ek);
  if (!full->ok || !tail->ok) return false;

  constexpr int64_t kBytes = 2;  // bf16 and f16
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  auto* pc = static_cast<char*>(c);
  std::mutex mu;
  std::string failure;
  runtime::parallel_for(s.batch * blocks, 1, [&](int64_t begin, int64_t end) {
    OmpThreads omp(1);
    dnnl::stream stream(cpu_engine());
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bi = t / blocks, r0 = (t % blocks) * rows;
      const Entry& e = std::min(rows, s.m - r0) == rows ? *full : *tail;
      const int64_t a_at = bi * s.m * s.k + (s.a_transposed ? r0 : r0 * s.k);
      thread_local std::vector<char> scratch;
      if (scratch.size() < e.scratch.get_size()) scratch.resize(e.scratch.get_size());
      try {
        auto bind = [](const memory::desc& d, const void* p) {
          return memory(d, cpu_engine(), const_cast<void*>(p));
        };
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_SRC, bind(e.a, pa + a_at * kBytes)},
            {DNNL_ARG_WEIGHTS, bind(e.b, pb + bi * s.k * s.n * kBytes)},
            {DNNL_ARG_DST, bind(e.c, pc + (bi * s.m + r0) * s.n * kBytes)},
            {DNNL_ARG_SCRATCHPAD, bind(e.scratch, scratch.data())}};
        if (ek.bias) args.emplace(DNNL_ARG_BIAS, bind(e.bias, epilogue->bias));
        e.prim.execute(stream, args);
        if (ek.activation == Activation::kRelu) {  // the block, still in cache
          relu_keeping_nan(pc + (bi * s.m + r0) * s.n * kBytes, std::min(rows, s.m - r0) * s.n,
                           s.dtype == DType::bf16);
        }
      } catch (const dnnl::error& err) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) failure = err.what();
      }
    }
  });
  if (!failure.empty()) {
    ctx.fail("oneDNN failed in the " + std::string(type_name(s.dtype)) + " matmul (" + full->impl +
             "): " + failure + " (" + shape_text(s) + ")");
  }
  g_matmuls.fetch_add(1);
  if (ek.bias || ek.activation != Activation::kNone) g_fused_matmuls.fetch_add(1);
  return true;
}

std::string cpu_isa() {
  using dnnl::cpu_isa;
  const cpu_isa isa = dnnl::get_effective_cpu_isa();
  const std::pair<cpu_isa, const char*> names[] = {{cpu_isa::sse41, "sse41"},
                                                   {cpu_isa::avx, "avx"},
                                                   {cpu_isa::avx2, "avx2"},
                                                   {cpu_isa::avx2_vnni, "avx2_vnni"},
                                                   {cpu_isa::avx512_core, "avx512_core"},
                                                   {cpu_isa::avx512_core_vnni, "avx512_core_vnni"},
                                                   {cpu_isa::avx512_core_bf16, "avx512_core_bf16"},
                                                   {cpu_isa::avx512_core_amx, "avx512_core_amx"}};
  for (const auto& [value, name] : names) {
    if (isa == value) return name;
  }
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%x", static_cast<unsigned>(isa));
  return hex;
}

std::string matmul_path(DType dtype) {
  if (dtype != DType::bf16 && dtype != DType::f16) return "not a low-precision type";
  const std::string type = type_name(dtype);
  if (!enabled()) return "widen to f32: oneDNN is switched off (KILN_ONEDNN=0)";
  if (!has_unit(dtype)) {
    return "widen to f32: oneDNN's ISA " + cpu_isa() + " has no " + type + " unit";
  }
  const MatmulShape s{1, 2048, 2048, 2048, false, false, dtype};
  const std::shared_ptr<const Entry> e = entry(s, block_rows(s));
  if (!e->ok) {
    return "widen to f32: oneDNN offers " + (e->impl.empty() ? "no implementation" : e->impl) +
           " for " + type + " matmuls on " + cpu_isa();
  }
  return "onednn " + e->impl + " (isa " + cpu_isa() + ")";
}

int64_t matmul_count() { return g_matmuls.load(); }
int64_t fused_matmul_count() { return g_fused_matmuls.load(); }

bool sgemm_block(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                 int64_t rows, int64_t k, int64_t n, bool a_transposed, bool b_transposed) {
  // KILN_ONEDNN_SGEMM=0 keeps f32 on Eigen (with the rest of oneDNN on): to measure the two.
  static const bool sgemm_on = [] {
    const char* env = std::getenv("KILN_ONEDNN_SGEMM");
    return env == nullptr || std::string(env) != "0";
  }();
  if (n < kSgemmMinColumns || rows <= 0 || k <= 0 || !sgemm_on || !enabled()) return false;
  OmpThreads one(1);
  const dnnl_status_t st = dnnl_sgemm(a_transposed ? 'T' : 'N', b_transposed ? 'T' : 'N', rows, n,
                                      k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  if (st != dnnl_success) return false;
  g_sgemms.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t sgemm_count() { return g_sgemms.load(std::memory_order_relaxed); }

}  // namespace kiln::ops::onednn

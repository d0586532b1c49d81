// The small runtime's kernels (libkiln_lite): int8 and float GEMM with fused bias, activation
// and (int8) fixed-point requantization, im2col, pooling, softmax, quantize and dequantize.
// Every int8 path is bit-exact with the reference path; the paths are chosen at run time.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::lite::kernels {

// Which code runs a GEMM. kReference is the plain loop the tests hold the others to;
// kGeneric is portable C++ (baseline x86-64, auto-vectorised); kAvx512 is AVX-512F for float
// and AVX512-VNNI (vpdpbusd) for int8.
enum class Path : uint8_t { kReference = 0, kGeneric = 1, kAvx512 = 2 };
const char* path_name(Path path);
// Whether this CPU runs `path` (int8: AVX512F+BW+VNNI; float: AVX512F).
bool int8_path_available(Path path);
bool float_path_available(Path path);
// The fastest available path (the KILN_LITE_PATH environment variable, "reference", "generic"
// or "avx512", overrides it when that path is available).
Path best_int8_path();
Path best_float_path();

enum class Activation : uint8_t { kNone = 0, kRelu = 1, kRelu6 = 2 };

// ---- fixed-point requantization (TF Lite's int8 scheme) -------------------------------------
// A positive real multiplier as a Q31 fraction in [2^30, 2^31) times 2^shift.
struct Requant {
  int32_t multiplier = 0;
  int32_t shift = 0;  // > 0: left shift
};
Requant quantize_multiplier(double real_multiplier);
// round(x * multiplier * 2^shift / 2^31): saturating rounding doubling high multiply, then a
// rounding (half away from zero) right shift, as gemmlowp defines them.
int32_t multiply_by_quantized_multiplier(int32_t x, Requant r);

// ---- int8 GEMM ------------------------------------------------------------------------------
// Weights [m][k] int8 (symmetric: zero point 0), packed once for one path.
class PackedInt8 {
 public:
  PackedInt8(const int8_t* weights, int64_t m, int64_t k, Path path);
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }
  Path path() const { return path_; }
  // sum over k of weights[j][k], for the zero-point corrections.
  const std::vector<int32_t>& row_sums() const { return row_sums_; }
  const int8_t* data() const { return data_.data(); }
  int64_t k_padded() const { return k_padded_; }  // the packed layout's k, a multiple of 4
  int64_t m_padded() const { return m_padded_; }  // a multiple of 16

 private:
  int64_t m_, k_, k_padded_, m_padded_;
  Path path_;
  std::vector<int8_t> data_;
  std::vector<int32_t> row_sums_;
};

struct QuantGemmParams {
  int32_t a_zero_point = 0;
  int32_t out_zero_point = 0;
  int32_t out_min = -128, out_max = 127;  // the activation's clamp, in output units
  const int32_t* bias = nullptr;          // [m] or null
  const Requant* requant = nullptr;       // [m], per output channel
};
// out[i][j] = clamp(out_zp + requant_j(sum_k (a[i][k] - a_zp) * w[j][k] + bias[j])),
// for the rows i < n of a [n][k] and out [n][m] (row-major, contiguous).
//
// pool_rows (1, 2 or 4; n a multiple of it) fuses a max pool: out is [n / pool_rows][m], each
// row the max of pool_rows consecutive rows' results, as a max pool over the GEMM's output
// would give. The max is taken before the requant, which is monotonic, so fusing changes no
// bit; only 1 / pool_rows of the requants run.
constexpr int kMaxPoolRows = 4;
// (Derives the per-channel operands each call; a QuantGemm derives them once.)
void quant_gemm(const int8_t* a, int64_t n, const PackedInt8& w, const QuantGemmParams& params,
                int8_t* out);
// quant_gemm for one op's weights and parameters, prepared once. `w`, and the bias and requant
// arrays `params` points to, must outlive it.
class QuantGemm {
 public:
  QuantGemm(const PackedInt8& w, const QuantGemmParams& params);
  void run(const int8_t* a, int64_t n, int8_t* out, int pool_rows = 1) const;

 private:
  const PackedInt8* w_;
  QuantGemmParams params_;
  std::vector<int32_t> operands_;  // the AVX-512 path's per-channel requant operands
  bool left_shifts_ = false;
};

// ---- float GEMM -----------------------------------------------------------------------------
// Weights [m][k] float, packed once for one path.
class PackedF32 {
 public:
  PackedF32(const float* weights, int64_t m, int64_t k, Path path);
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }
  Path path() const { return path_; }
  const float* data() const { return data_.data(); }
  int64_t m_padded() const { return m_padded_; }

 private:
  int64_t m_, k_, m_padded_;
  Path path_;
  std::vector<float> data_;
};
// out[i][j] = act(sum_k a[i][k] * w[j][k] + bias[j]) for a [n][k], out [n][m]; bias may be null.
// pool_rows fuses a max pool as for QuantGemm, taken after the bias and activation with
// std::max from the lowest float, as max_pool_f32 takes it: the same bits, NaNs included.
void gemm_f32(const float* a, int64_t n, const PackedF32& w, const float* bias, Activation act,
              float* out, int pool_rows = 1);

// ---- convolution helpers and the other ops (NHWC) -------------------------------------------
struct Window {
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  // The output size of an input of h x w (0 or less when the window does not fit).
  int64_t out_h(int64_t h) const { return (h + pad_top + pad_bottom - kh) / stride_h + 1; }
  int64_t out_w(int64_t w) const { return (w + pad_left + pad_right - kw) / stride_w + 1; }
};
// Patches of x [n][h][w][c] as rows [n*oh*ow][kh*kw*c] (ky, kx, c order), positions outside
// the input filled with pad_value (an int8 input's zero point, so padding adds nothing).
//
// With a pool of pool_h x pool_w (the GEMM's fused max pool, stride = size, no padding) the
// rows are the output positions each pooled output reads, in pooled order: [n][oh / pool_h]
// [ow / pool_w][pool_h][pool_w]; positions past the last whole pool window are left out.
void im2col_int8(const int8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                 int8_t pad_value, int8_t* patches, int64_t pool_h = 1, int64_t pool_w = 1);
void im2col_f32(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                float* patches, int64_t pool_h = 1, int64_t pool_w = 1);
// Depthwise convolution of x [n][h][w][c] by weights [kh][kw][m], m = c * multiplier: output
// channel o reads input channel o / multiplier. Padded positions add nothing. int8: per-channel
// requant and clamp as QuantGemm's (params.requant and bias [m]); float: bias (or null) and
// activation. Path::kReference is the plain loop the tests hold the other path to (int8 bit for
// bit; float sums the taps in the same order); any other path loops over channels innermost.
void depthwise_conv_int8(const int8_t* x, int64_t n, int64_t h, int64_t w, int64_t c,
                         const Window& win, const int8_t* weights, int64_t m,
                         const QuantGemmParams& params, Path path, int8_t* out);
void depthwise_conv_f32(const float* x, int64_t n, int64_t h, int64_t w, int64_t c,
                        const Window& win, const float* weights, int64_t m, const float* bias,
                        Activation act, Path path, float* out);

// Pooling over [n][h][w][c]; padded positions are left out (of the max and of the average's
// count). int8 pooling keeps the input's scale and zero point; its average rounds half away
// from zero.
void max_pool_int8(const int8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                   int8_t* out);
void max_pool_f32(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                  float* out);
void avg_pool_int8(const int8_t* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                   int8_t* out);
void avg_pool_f32(const float* x, int64_t n, int64_t h, int64_t w, int64_t c, const Window& win,
                  float* out);
// Row-wise softmax of [rows][cols], numerically stable (max subtracted).
void softmax_f32(const float* x, int64_t rows, int64_t cols, float* out);
// Elementwise: 1 tanh, 2 sigmoid, 3 swish (x * sigmoid(x)), 4 softplus (log(1 + e^x), without
// overflow), 5 relu; format::FloatActivation's values.
// 6 gelu (x * Phi(x), with erf).
void activation_f32(const float* x, int64_t count, int32_t kind, float* out);
// out[r][j] = x[r][j] * scale[j] + shift[j] for the rows r < rows of x [rows][c].
void channel_affine_f32(const float* x, int64_t rows, int64_t c, const float* scale,
                        const float* shift, float* out);
// Each row of x [rows][c] normalized: (x - mean) / sqrt(variance + epsilon) * gamma + beta, the
// mean and (biased) variance over the row.
void layer_norm_f32(const float* x, int64_t rows, int64_t c, const float* gamma, const float* beta,
                    float epsilon, float* out);

// int8 a + b at the output's scale, TF Lite's way: both inputs shifted left 20 bits and scaled
// to twice the larger input scale, summed, then requantized to the output.
struct QuantAddParams {
  int32_t a_zero_point = 0, b_zero_point = 0, out_zero_point = 0;
  Requant a, b, out;
};
QuantAddParams quant_add_params(float a_scale, int32_t a_zero_point, float b_scale,
                                int32_t b_zero_point, float out_scale, int32_t out_zero_point);
void add_int8(const int8_t* a, const int8_t* b, int64_t count, const QuantAddParams& params,
              int8_t* out);
void add_f32(const float* a, const float* b, int64_t count, float* out);
// Requantizes q (scale, zero point) to (out_scale, out_zero_point): clamp(zo + requant(q - zi)).
void requantize_int8(const int8_t* q, int64_t count, Requant r, int32_t zero_point,
                     int32_t out_zero_point, int8_t* out);
// q = clamp(round_half_away(x / scale) + zero_point, -128, 127); x = scale * (q - zero_point).
void quantize_f32(const float* x, int64_t count, float scale, int32_t zero_point, int8_t* out);
void dequantize_int8(const int8_t* q, int64_t count, float scale, int32_t zero_point, float* out);

}  // namespace kiln::lite::kernels

// A direct f32 convolution for few input channels: a network's first layer (1 channel for
// Fashion-MNIST, 3 for RGB). There im2col's patch rows are 9-27 values long and a GEMM over
// them (Kiln's or oneDNN's) runs at a tenth of the FPU's rate; these kernels keep each block of
// output pixels' sums in registers across all the taps instead (forward), or each tap's kernel
// gradient across all the pixels (kernel gradient). Used by the convolution op and its kernel
// gradient (ops/conv.cc), and by the compiler's conv_pool_kernel_grad, where they serve.
#pragma once

#include <cstdint>

namespace kiln::ops::direct_conv {

// One 2-d NHWC convolution with an HWIO kernel, one feature group, no input dilation.
struct Geometry {
  int64_t batch, in_h, in_w, c_in;
  int64_t out_h, out_w, c_out;
  int64_t k_h, k_w;
  int64_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
  int64_t taps() const { return k_h * k_w * c_in; }
};

// The widest c_in and c_out the kernels take.
inline constexpr int64_t kMaxInChannels = 4;
inline constexpr int64_t kMaxOutChannels = 64;

// Whether the kernels serve g: c_in <= kMaxInChannels, 1 <= c_out <= kMaxOutChannels, an image's
// output gradient small enough to stay in cache where the kernel gradient reads it several
// times (more taps than it keeps in registers at once), and not switched off
// (set_enabled(false), or KILN_DIRECT_CONV=0 in the environment at startup).
bool serves(const Geometry& g);
bool enabled();
void set_enabled(bool on);

// How many times forward_pool and pool_kernel_grad_add below ran since the process started (for
// tests that check which path served a case; forward's and kernel_grad_add's bits tell).
struct Counts {
  int64_t forward_pool = 0, pool_kernel_grad = 0;
};
Counts counts();

// Output rows [oy0, oy1) of one image: y [out_h, out_w, c_out] (those rows written) from x
// [in_h, in_w, c_in] and the kernel w [k_h, k_w, c_in, c_out]. Each output is the sum from +0
// over the taps in kernel order (row, column, channel) of input x kernel, one multiply and one
// add each, so the bits are the same at every ISA level and however the rows are split; a tap
// on the padding adds 0 x kernel, as im2col's zero does.
void forward(const Geometry& g, const float* x, const float* w, float* y, int64_t oy0,
             int64_t oy1);

// dw [k_h, k_w, c_in, c_out] += for each image of [b0, b1) in order, the sum from +0 over its
// output pixels in row-major order of input x dy (dy [batch, out_h, out_w, c_out]).
void kernel_grad_add(const Geometry& g, const float* x, const float* dy, float* dw, int64_t b0,
                     int64_t b1);

// ---- with a max pool --------------------------------------------------------------------
// The first layer of a CNN is usually conv -> bias -> relu -> max pool. Where only the pool's
// output is wanted (training keeps the pool's taps for the backward pass instead of the
// convolution's output), these take each pool window's pixels together and never store the
// convolution's output.

// The bias and activation after the convolution, then a max pool over disjoint, unpadded
// pool_h x pool_w windows (the rows and columns left over dropped).
struct PoolEpilogue {
  const float* bias = nullptr;  // c_out values, or none (no add)
  bool relu = false;            // x <= 0 becomes +0 (NaN stays), after the bias
  int64_t pool_h = 2, pool_w = 2;
};

// The flag or'ed into a tap byte where the window's maximum is <= 0.
inline constexpr uint8_t kNonPositive = 0x80;

// Whether the pooled kernels take these channel counts and pool window (2 x 2, the only one),
// enabled or not: what a compiler may count on before it knows the other sizes.
constexpr bool takes_pool(int64_t c_in, int64_t c_out, int64_t pool_h, int64_t pool_w) {
  return c_in >= 1 && c_in <= kMaxInChannels && c_out >= 1 && c_out <= kMaxOutChannels &&
         pool_h == 2 && pool_w == 2;
}

// Whether forward_pool and pool_kernel_grad_add serve g with p: serves(g) and takes_pool.
bool serves_pool(const Geometry& g, const PoolEpilogue& p);

// For the images [b0, b1): pooled [batch, PH, PW, c_out], each window's maximum of
// e = activation(conv + bias) (conv as forward computes it, the bias added and relu applied as
// the epilogue ops do: the same bits), the first NaN in row-major window order winning, else the
// first of the greatest; and taps (the same shape, u8) that window position, or'ed with
// kNonPositive where the maximum is <= 0.
void forward_pool(const Geometry& g, const float* x, const float* w, const PoolEpilogue& p,
                  float* pooled, uint8_t* taps, int64_t b0, int64_t b1);

// The kernel and bias gradients through forward_pool's 2 x 2 pool: for the images [b0, b1), dz (the gradient
// of the convolution's output) is pool_grad [batch, PH, PW, c_out] at each window's tap
// (`taps & keep`; with keep 0xff a flagged tap matches no position) and 0 elsewhere; dw += the
// kernel gradient of dz, db [c_out] += the sum of dz. dz itself is never stored. db's sums go on
// window by window (row-major, images in order) from db's value; dw gets each image's sum, from
// +0, added.
void pool_kernel_grad_add(const Geometry& g, const float* x, const uint8_t* taps,
                          const float* pool_grad, uint8_t keep, float* dw, float* db, int64_t b0,
                          int64_t b1);

}  // namespace kiln::ops::direct_conv

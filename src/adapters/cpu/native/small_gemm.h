// The host GEMM at decode sizes (small_gemm.cpp): x [rows, K] @ weight [N, K]^T + bias.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace ascend_host {

// The most rows of x the small GEMM takes; more go to oneDNN.
constexpr int kSmallGemmMaxRows = 16;

// Past two rows, the most multiply-adds (rows * N * K) at which the small GEMM beats
// oneDNN's call (scripts/bench_gemm.py --small-weights, 2 threads): 256 x 384 at 16 rows
// (1.6M) measured 1.03-1.29x, 768 x 1280 at 4 rows (3.9M) 1.19-1.24x, 768 x 768 at 8 rows
// (4.7M) 0.81-1.01x, and bigger products down to 0.5x.
constexpr int64_t kSmallGemmMaxWork = int64_t{1} << 22;

// Whether the small GEMM is the faster kernel for x2d [rows, K] @ weight [N, K]^T: one or
// two rows (decode at batch 1 and 2: bound by reading the weight), or a few rows of a
// small weight (bound by oneDNN's per-call work).
bool small_gemm_preferred(const at::Tensor& x2d, const at::Tensor& weight);

// Whether the small GEMM serves these inputs: float32 (a build with AVX-512) or bf16 (with
// AVX-512 BW and BF16) of one dtype, x 2-D with a contiguous last dim and at most
// kSmallGemmMaxRows rows, a dense contiguous weight.
bool small_gemm_fits(const at::Tensor& x2d, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias);

// x2d @ weight^T + bias, [rows, N], in x's dtype; the inputs must fit (small_gemm_fits).
at::Tensor small_gemm(const at::Tensor& x2d, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias);

}  // namespace ascend_host

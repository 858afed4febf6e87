// The host GEMM at decode sizes (small_gemm.cpp): x [rows, K] @ weight [N, K]^T + bias.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace ascend_host {

// The most rows of x the small GEMM takes; more go to oneDNN.
constexpr int kSmallGemmMaxRows = 2;

// Whether the small GEMM serves these inputs: float32 (a build with AVX-512) or bf16 (with
// AVX-512 BW and BF16) of one dtype, x 2-D with a contiguous last dim and at most
// kSmallGemmMaxRows rows, a dense contiguous weight.
bool small_gemm_fits(const at::Tensor& x2d, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias);

// x2d @ weight^T + bias, [rows, N], in x's dtype; the inputs must fit (small_gemm_fits).
at::Tensor small_gemm(const at::Tensor& x2d, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias);

}  // namespace ascend_host

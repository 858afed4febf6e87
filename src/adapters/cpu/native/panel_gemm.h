// The host's GEMM at decode batches (panel_gemm.cpp), float32 and bf16: x [rows, K] @
// weight^T + bias over the weight packed once into panels of 16 output columns.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace ascend_host {

// The row counts the panel GEMM serves (packed_linear.cpp): below, the small GEMM over the
// dense weight; above, oneDNN, whose per-call cost no longer shows against the work.
constexpr int64_t kPanelMinRows = 3;
constexpr int64_t kPanelMaxRows = 64;

// Whether this build has the panel kernel for `dtype`: float32 (AVX-512 F), bf16 (also BW
// and BF16, as dot_kernels.h).
bool panel_gemm_builds(c10::ScalarType dtype);

// `weight` [N, K] (any strides) as panels, zero past N and K. float32: [ceil(N / 16), K, 16],
// row k of panel p holding weight[16 p .. 16 p + 15, k]. bf16: [ceil(N / 16), ceil(K / 2),
// 32], row s of panel p holding the pairs (weight[16 p + c, 2 s], weight[16 p + c, 2 s + 1])
// for c = 0 .. 15, as VDPBF16PS reads them.
at::Tensor pack_panels(const at::Tensor& weight);

// Whether the panel GEMM serves x2d against a pack of an [n, K] weight: x's dtype, x 2-D
// with a contiguous last dim and kPanelMinRows to kPanelMaxRows rows, bias [n] contiguous.
bool panel_gemm_fits(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                     const std::optional<at::Tensor>& bias);

// x2d @ weight^T + bias, [rows, n]; the inputs must fit (panel_gemm_fits).
at::Tensor panel_gemm(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                      const std::optional<at::Tensor>& bias);

}  // namespace ascend_host

// The host's float32 GEMM at decode batches (panel_gemm.cpp): x [rows, K] @ weight^T + bias
// over the weight packed once into panels of 16 output columns.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace ascend_host {

// The row counts the panel GEMM serves (packed_linear.cpp): below, the small GEMM over the
// dense weight; above, oneDNN, whose per-call cost no longer shows against the work.
constexpr int64_t kPanelMinRows = 3;
constexpr int64_t kPanelMaxRows = 64;

// Whether this build has the panel kernel for `dtype` (float32, with AVX-512 F).
bool panel_gemm_builds(c10::ScalarType dtype);

// `weight` [N, K] (float32, any strides) as panels: [ceil(N / 16), K, 16], row k of panel p
// holding weight[16 p .. 16 p + 15, k], the columns past N zero.
at::Tensor pack_panels(const at::Tensor& weight);

// Whether the panel GEMM serves x2d against a pack of an [n, K] weight: float32, x 2-D with
// a contiguous last dim and kPanelMinRows to kPanelMaxRows rows, bias [n] contiguous.
bool panel_gemm_fits(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                     const std::optional<at::Tensor>& bias);

// x2d @ weight^T + bias, [rows, n]; the inputs must fit (panel_gemm_fits).
at::Tensor panel_gemm(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                      const std::optional<at::Tensor>& bias);

}  // namespace ascend_host

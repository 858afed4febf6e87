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

// The rows of x packed_linear sends to the panel GEMM, for x of `dtype` and K columns:
// kPanelMinRows to kPanelMaxRows, but 1 to 32 where the bf16 tiles take K
// (panel_gemm_amx_takes). oneDNN's bf16 linear on AMX chains K through the tiles from 1 to
// 32 rows, in the tiles' order (the same bits, measured at K 64 to 7168, N 128 to 8000),
// and blocks K its own way past 32; there it is as fast. So on AMX the host keeps oneDNN's
// numbers at every row count, which are what the NPU path's linears (oneDNN's, on the
// emulator) give.
struct PanelRows {
  int64_t min, max;
};
PanelRows panel_gemm_rows(c10::ScalarType dtype, int64_t K);

// Whether this build has the panel kernel for `dtype`: float32 (AVX-512 F), bf16 (also BW
// and BF16, as dot_kernels.h).
bool panel_gemm_builds(c10::ScalarType dtype);

// `weight` [N, K] (any strides) as panels, zero past N and K. float32: [ceil(N / 16), K, 16],
// row k of panel p holding weight[16 p .. 16 p + 15, k]. bf16: [ceil(N / 16), ceil(K / 2),
// 32], row s of panel p holding the pairs (weight[16 p + c, 2 s], weight[16 p + c, 2 s + 1])
// for c = 0 .. 15, as VDPBF16PS reads them.
at::Tensor pack_panels(const at::Tensor& weight);

// Whether the panel GEMM serves x2d against a pack of an [n, K] weight: x's dtype, x 2-D
// with a contiguous last dim and kPanelMinRows to kPanelMaxRows rows (from 1 where the
// tiles take K), bias [n] contiguous.
bool panel_gemm_fits(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                     const std::optional<at::Tensor>& bias);

// x2d @ weight^T + bias, [rows, n]; the inputs must fit (panel_gemm_fits).
at::Tensor panel_gemm(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                      const std::optional<at::Tensor>& bias);

}  // namespace ascend_host

// The bf16 panel GEMM on AMX tiles (panel_gemm_amx.cpp), for panel_gemm.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace ascend_host {

// Whether the tile path serves a bf16 GEMM of K (x's columns): a build with AMX in a process
// granted it (amx_tiles.h), and K whole tiles of 32.
bool panel_gemm_amx_takes(int64_t K);

// out = x2d @ weight^T + bias over the weight's bf16 panels (pack_panels), the inputs as
// panel_gemm_fits takes them and K one panel_gemm_amx_takes serves.
void panel_gemm_amx(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                    const std::optional<at::Tensor>& bias, at::Tensor& out);

}  // namespace ascend_host

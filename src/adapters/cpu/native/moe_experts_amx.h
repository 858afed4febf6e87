// The bf16 MoE experts' two GEMMs on AMX tiles (moe_experts_amx.cpp), for moe_experts.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>

#include "moe_layout.h"

namespace ascend_host {
namespace moe {

// Whether the tile path serves a layer of hidden size H and intermediate size I whose
// input spans x_span elements (rows x row stride): a build with AMX in a process granted
// it (amx_tiles.h), both GEMMs' K (H, then I) whole tiles of 32, and x's rows addressable
// by 32-bit offsets (the pack gathers them).
bool amx_takes(int64_t hidden, int64_t inter, int64_t x_span);

// y [rows, H] (row r: bucketed row r of `lay`) = each row through its expert's SwiGLU MLP,
// with the rounding of the dot path: bf16 at the gate/up GEMM's outputs, at swiglu's and at
// the down GEMM's. The layer must be one amx_takes serves.
void amx_expert_mlps(const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                     const Layout& lay, c10::BFloat16* y);

}  // namespace moe
}  // namespace ascend_host

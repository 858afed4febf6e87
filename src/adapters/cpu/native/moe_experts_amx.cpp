// The bf16 MoE experts' GEMMs on AMX tiles (amx_tiles.h), where the CPU has them.
//
// The dot path (moe_experts.cpp) streams each expert's weight rows through VDPBF16PS, four
// rows of x at a time; at a prefill that re-reads every weight row once per four rows and
// runs one 16-lane multiply-add per pair of k. One TDPBF16PS multiplies a 16 x 32 block of
// weight rows with 32 k of 16 rows of x (16 x 16 outputs), so here each GEMM computes the
// transposed product, out^T = W . x^T: A is 16 rows of the expert's dense weight (read in
// place, no repacking), B is 16 of the expert's rows of x in TDPBF16PS's pair layout
// (packed once per call: x here, the swiglu output by the gate/up GEMM's epilogue), an
// output tile holds 16 weight rows x 16 rows of x. An expert's rows go in groups of 16, the
// last group padded with zero rows, whose columns are computed and dropped.
//
// The roundings are the dot path's (bf16 at the gate/up outputs, at swiglu's and at the
// down GEMM's, float32 inside); the sums are TDPBF16PS's over K in steps of 32, so a row
// can differ from the dot path's by a rounding step. Each output is one tile element's
// chain over K, whatever the group it falls in or the other rows beside it, so a row's
// numbers do not depend on its batch. Work items are an expert's 32 output columns (two
// tiles per GEMM output, four for gate and up), over all of the expert's groups, so the
// weight block a thread reads stays in its cache across the groups.
#include "moe_experts_amx.h"

#include "amx_tiles.h"
#include "scratch.h"
#include "vec_exp.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ascend_host {
namespace moe {

#if defined(ASCEND_AMX_BF16)
namespace {

using bf16 = c10::BFloat16;
constexpr int64_t kGroup = amx::kRows;  // rows of x a tile of B holds
constexpr int64_t kStep = amx::kStepK;
constexpr int64_t kBlock = 32;           // output columns of a work item: two tiles

struct Item {
  int64_t expert, column;
};

// The experts' groups of up to 16 rows: expert e's are [first[e], first[e + 1]).
struct Groups {
  std::vector<int64_t> first;
  std::vector<int64_t> expert_of;  // per group
};

Groups groups_of(const Layout& lay) {
  Groups g;
  g.first.assign(lay.experts + 1, 0);
  for (int64_t e = 0; e < lay.experts; ++e) {
    const int64_t count = lay.offsets[e + 1] - lay.offsets[e];
    g.first[e + 1] = g.first[e] + (count + kGroup - 1) / kGroup;
    for (int64_t q = g.first[e]; q < g.first[e + 1]; ++q) g.expert_of.push_back(e);
  }
  return g;
}

std::vector<Item> items_of(const Layout& lay, const Groups& g, int64_t columns) {
  std::vector<Item> out;
  for (int64_t e = 0; e < lay.experts; ++e) {
    if (g.first[e + 1] == g.first[e]) continue;
    for (int64_t c = 0; c < columns; c += kBlock) out.push_back({e, c});
  }
  return out;
}

// 16 float32 lanes rounded to bf16 (to nearest even), as bf16 bits in the low half of each
// 32-bit lane, and those bits back as float32.
inline __m512i bf16_bits(__m512 v) { return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v)); }
inline __m512 widened(__m512i bits) { return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)); }

// act for 16 rows of x: round(silu(round(gate)) * round(up)), as bf16 bits in 32-bit lanes.
inline __m512i swiglu16(__m512 gate, __m512 up) {
  const __m512 g = widened(bf16_bits(gate)), u = widened(bf16_bits(up));
  const __m512 denominator = _mm512_add_ps(_mm512_set1_ps(1.0f), ascend_host::exp16(_mm512_sub_ps(_mm512_setzero_ps(), g)));
  return bf16_bits(_mm512_mul_ps(_mm512_div_ps(g, denominator), u));
}

// A group's rows (`offsets`: each row's first element from x, in bf16 elements; `count` of
// them, up to 16) as B tiles: pair s of row n at dst[(s * 16 + n) * 2 ..], zero rows past
// count. One gather of 16 pairs per s.
void pack_pairs(const bf16* x, const int32_t* offsets, int64_t count, int64_t K, bf16* dst) {
  const __mmask16 mask = static_cast<__mmask16>(count >= kGroup ? 0xFFFFu : (1u << count) - 1u);
  __m512i index = _mm512_maskz_loadu_epi32(mask, offsets);
  const __m512i two = _mm512_set1_epi32(2);
  auto* out = reinterpret_cast<__m512i*>(dst);
  for (int64_t s = 0; s < K / 2; ++s) {
    _mm512_storeu_si512(out + s, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, index, x, 2));
    index = _mm512_add_epi32(index, two);
  }
}

// out[t] (16 x 16 float32) = the 16 weight rows from a[t] (row stride `stride` bytes) dotted
// with the 16 rows of one group's B tiles `b`, over K: tiles 0 to NA - 1 the outputs, 4 B,
// 5 to 7 A (in turn).
template <int NA>
inline void weight_tiles(const bf16* const (&a)[NA], int64_t stride, const bf16* b, int64_t K,
                         float (*out)[kGroup][kGroup]) {
  static_assert(NA == 2 || NA == 4, "two or four output tiles");
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (NA == 4) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t kk = 0; kk < K; kk += kStep) {
    _tile_loadd(4, b + kk * kGroup, 64);
    _tile_loadd(5, a[0] + kk, stride);
    _tile_dpbf16ps(0, 5, 4);
    _tile_loadd(6, a[1] + kk, stride);
    _tile_dpbf16ps(1, 6, 4);
    if constexpr (NA == 4) {
      _tile_loadd(7, a[2] + kk, stride);
      _tile_dpbf16ps(2, 7, 4);
      _tile_loadd(5, a[3] + kk, stride);
      _tile_dpbf16ps(3, 5, 4);
    }
  }
  _tile_stored(0, out[0], 64);
  _tile_stored(1, out[1], 64);
  if constexpr (NA == 4) {
    _tile_stored(2, out[2], 64);
    _tile_stored(3, out[3], 64);
  }
}

}  // namespace

bool amx_takes(int64_t hidden, int64_t inter, int64_t x_span) {
  return amx::amx_ready() && hidden > 0 && inter > 0 && hidden % kStep == 0 &&
         inter % kStep == 0 && x_span < (int64_t{1} << 31);
}

void amx_expert_mlps(const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
                     const Layout& lay, bf16* y) {
  TORCH_CHECK(amx_takes(lay.hidden, lay.inter, hidden.size(0) * hidden.stride(0)), "moe_experts: the AMX path got a layer it "
              "does not take (hidden ", lay.hidden, ", intermediate ", lay.inter, ")");
  const int64_t H = lay.hidden, I = lay.inter, k = lay.top_k;
  const Groups g = groups_of(lay);
  const int64_t groups = g.first[lay.experts];
  const bf16* x = hidden.const_data_ptr<bf16>();
  const int64_t ldx = hidden.stride(0);
  const bf16* gate_up = w13.const_data_ptr<bf16>();
  const bf16* down = w2.const_data_ptr<bf16>();
  // B tiles of x and of the swiglu output, group q at q * 16 * K (scratch slots 1 and 2;
  // moe_experts.cpp's y is slot 0); every element is written before it is read (the
  // padding rows as zeros).
  bf16* xb = scratch<bf16>(1, groups * kGroup * H);
  bf16* ab = scratch<bf16>(2, groups * kGroup * I);

  at::parallel_for(0, groups, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t e = g.expert_of[q];
      const int64_t r0 = lay.offsets[e] + (q - g.first[e]) * kGroup;
      const int64_t count = std::min(kGroup, lay.offsets[e + 1] - r0);
      int32_t offsets[kGroup] = {};
      for (int64_t n = 0; n < count; ++n) {
        offsets[n] = static_cast<int32_t>((lay.slot_of_row[r0 + n] / k) * ldx);
      }
      pack_pairs(x, offsets, count, H, xb + q * kGroup * H);
    }
  });

  // Gate/up and swiglu: output tiles 0, 1 the item's gate rows, 2, 3 its up rows.
  const std::vector<Item> act_items = items_of(lay, g, I);
  at::parallel_for(0, static_cast<int64_t>(act_items.size()), 1, [&](int64_t i0, int64_t i1) {
    amx::TileScope scope;
    alignas(64) float out[4][kGroup][kGroup];
    for (int64_t it = i0; it < i1; ++it) {
      const Item item = act_items[it];
      const bf16* w = gate_up + item.expert * 2 * I * H;
      const bf16* gate0 = w + item.column * H;
      const bf16* gate1 = gate0 + kGroup * H;
      const bf16* up0 = w + (I + item.column) * H;
      const bf16* up1 = up0 + kGroup * H;
      const int64_t stride = H * static_cast<int64_t>(sizeof(bf16));
      for (int64_t q = g.first[item.expert]; q < g.first[item.expert + 1]; ++q) {
        const bf16* xq = xb + q * kGroup * H;
        weight_tiles<4>({gate0, gate1, up0, up1}, stride, xq, H, out);
        // out[t][c]: weight row c of tile t, for the group's 16 rows. act as B of the down
        // GEMM: row (column / 2) holds the pairs of columns (2j, 2j + 1).
        auto* aq = reinterpret_cast<__m512i*>(ab + q * kGroup * I);
        for (int64_t c = 0; c < kBlock; c += 2) {
          const int64_t t = c / kGroup, row = c % kGroup;
          const __m512i even = swiglu16(_mm512_load_ps(out[t][row]), _mm512_load_ps(out[2 + t][row]));
          const __m512i odd =
              swiglu16(_mm512_load_ps(out[t][row + 1]), _mm512_load_ps(out[2 + t][row + 1]));
          _mm512_storeu_si512(aq + (item.column + c) / 2, _mm512_or_si512(even, _mm512_slli_epi32(odd, 16)));
        }
      }
    }
  });

  // Down: output tiles 0, 1 the item's 32 hidden columns.
  const std::vector<Item> out_items = items_of(lay, g, H);
  at::parallel_for(0, static_cast<int64_t>(out_items.size()), 1, [&](int64_t i0, int64_t i1) {
    amx::TileScope scope;
    alignas(64) float out[2][kGroup][kGroup];
    for (int64_t it = i0; it < i1; ++it) {
      const Item item = out_items[it];
      const bf16* d0 = down + item.expert * H * I + item.column * I;
      const bf16* d1 = d0 + kGroup * I;
      const int64_t stride = I * static_cast<int64_t>(sizeof(bf16));
      for (int64_t q = g.first[item.expert]; q < g.first[item.expert + 1]; ++q) {
        const bf16* aq = ab + q * kGroup * I;
        weight_tiles<2>({d0, d1}, stride, aq, I, out);
        const int64_t r0 = lay.offsets[item.expert] + (q - g.first[item.expert]) * kGroup;
        const int64_t count = std::min(kGroup, lay.offsets[item.expert + 1] - r0);
        // out[t][c][n] to y[r0 + n][column + 16 t + c]: a gather of each row's 16 columns.
        const __m512i across = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                  _mm512_set1_epi32(kGroup));
        for (int64_t n = 0; n < count; ++n) {
          bf16* yr = y + (r0 + n) * H + item.column;
          const __m512i at = _mm512_add_epi32(across, _mm512_set1_epi32(static_cast<int32_t>(n)));
          for (int t = 0; t < 2; ++t) {
            const __m512 v = _mm512_i32gather_ps(at, &out[t][0][0], 4);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(yr + t * kGroup), (__m256i)_mm512_cvtneps_pbh(v));
          }
        }
      }
    }
  });
}

#else

bool amx_takes(int64_t, int64_t, int64_t) { return false; }

void amx_expert_mlps(const at::Tensor&, const at::Tensor&, const at::Tensor&, const Layout&,
                     c10::BFloat16*) {
  TORCH_CHECK(false, "moe_experts: this build has no AMX path (check amx_takes first)");
}

#endif

}  // namespace moe
}  // namespace ascend_host

// The host's unquantized MoE experts as one native op: each token's k routed slots through
// their experts' SwiGLU MLPs and summed with the routing weights, in one call.
//
// The precision contract of CpuMoeOps (permute, grouped_mlp, unpermute) and of the NPU's
// grouped-matmul path: every product accumulates in float32 and rounds once at each op's
// output: the gate/up GEMM's output, swiglu's, the down GEMM's, and the combine's, whose
// routing weights are first rounded to the rows' dtype. The GEMMs sum in dot_kernels.h's
// order (CpuMoeOps' torch.matmul sums in oneDNN's), so a row can differ from the loop's by
// a rounding step; the combine adds the slots in slot order, as the loop does.
//
// Why: at decode an expert gets a few rows, and the loop costs a torch matmul call (tens
// of us on the host) per expert and per GEMM, plus the Python around it; here the experts'
// rows are bucketed in one pass (stable, in (token, slot) order, as the loop's sort) and
// the GEMMs run over each expert's rows in groups of up to 4, in three parallel regions:
// tiles of 16 outputs (4 rows x 4 weight rows, 2 x 8, 1 x 16), one-row weight streams for
// the rest, the same bits either way (dot_kernels.h). At a 1024-token prefill of the
// benchmark's small Qwen3-MoE the tiles took the call from 1.99 to 1.59 ms (float32) and
// from 1.68 to 1.20 ms (bf16), the fastest of two processes each (docs/benchmarks.md).
// On a CPU with AMX, a bf16 layer whose hidden and intermediate sizes are multiples of 32
// runs its GEMMs on AMX tiles instead (moe_experts_amx.cpp); the bucketing and the combine
// are the same. The buffers between the steps are per-thread scratch (scratch.h), and the
// combine runs 16 columns a vector: on the Intel AMX host at that prefill, bf16, the call
// went from 4.74 to 0.79 ms (vLLM's CPU build: 0.78), and from 112 to 53 us at 16 tokens
// (vLLM's: 67).
//
// A functional op with a Meta kernel, so a compiled graph can call it: the caller checks
// that it applies first (native.moe_experts_takes: a dtype this CPU's build has a dot
// kernel for, the layouts it reads), and anything else is an error naming the contract,
// as is a local id past the experts; -1 (an expert on another rank) is left out.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "dot_kernels.h"
#include "moe_experts_amx.h"
#include "moe_layout.h"
#include "scratch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

#if defined(ASCEND_SMALL_GEMM_F32)

// Columns of one parallel work item: the gate/up GEMM's intermediate columns (two weight
// rows each), the down GEMM's hidden columns.
constexpr int64_t kActColumns = 16;
constexpr int64_t kOutColumns = 32;
constexpr int kMaxRows = 4;  // rows of x per weight-row stream

struct Item {
  int64_t expert, begin, end;
};

using ascend_host::moe::Layout;

template <typename Id>
void bucket(const Id* ids, Layout& lay) {
  const int64_t slots = lay.tokens * lay.top_k;
  std::vector<int64_t> counts(lay.experts, 0);
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t e = static_cast<int64_t>(ids[s]);
    if (e < 0) continue;
    TORCH_CHECK(e < lay.experts, "moe_experts: local expert id ", e, " is past the layer's ",
                lay.experts, " experts");
    ++counts[e];
  }
  lay.offsets.assign(lay.experts + 1, 0);
  for (int64_t e = 0; e < lay.experts; ++e) lay.offsets[e + 1] = lay.offsets[e] + counts[e];
  std::vector<int64_t> next(lay.offsets.begin(), lay.offsets.end() - 1);
  lay.slot_of_row.resize(lay.offsets[lay.experts]);
  lay.row_of_slot.assign(slots, -1);
  for (int64_t s = 0; s < slots; ++s) {
    const int64_t e = static_cast<int64_t>(ids[s]);
    if (e < 0) continue;
    const int64_t r = next[e]++;
    lay.slot_of_row[r] = s;
    lay.row_of_slot[s] = r;
  }
}

std::vector<Item> items(const Layout& lay, int64_t columns, int64_t block) {
  std::vector<Item> out;
  for (int64_t e = 0; e < lay.experts; ++e) {
    if (lay.offsets[e + 1] == lay.offsets[e]) continue;
    for (int64_t c = 0; c < columns; c += block) out.push_back({e, c, std::min(columns, c + block)});
  }
  return out;
}

// The expert's rows [first, last) in groups of up to kMaxRows: emit(count, first row of the
// group, the group's inputs), the count a compile-time constant for the dot kernel.
template <typename D, typename Emit>
void over_row_groups(int64_t first, int64_t last, const typename D::T* const* xs_of, Emit emit) {
  for (int64_t r = first; r < last; r += kMaxRows) {
    const int n = static_cast<int>(std::min<int64_t>(kMaxRows, last - r));
    switch (n) {
      case 1: emit(std::integral_constant<int, 1>{}, r, xs_of + (r - first)); break;
      case 2: emit(std::integral_constant<int, 2>{}, r, xs_of + (r - first)); break;
      case 3: emit(std::integral_constant<int, 3>{}, r, xs_of + (r - first)); break;
      default: emit(std::integral_constant<int, 4>{}, r, xs_of + (r - first)); break;
    }
  }
}

// sums[m * n + j] = wrow(j) . x_m for the n weight rows of one work item (n <= kMaxItemRows)
// and the group's Mx rows: 16-output tiles where Mx divides 16, one-row streams for the
// rest, both in dot_kernels.h's order.
constexpr int64_t kMaxItemRows = 2 * kActColumns > kOutColumns ? 2 * kActColumns : kOutColumns;

template <typename D, int Mx, typename WRow>
void item_sums(WRow wrow, int64_t n, int64_t K, const typename D::T* const* xs, float* sums) {
  int64_t j = 0;
  if constexpr (16 % Mx == 0) {
    constexpr int Nw = 16 / Mx;
    for (; j + Nw <= n; j += Nw) {
      const typename D::T* ws[Nw];
      for (int i = 0; i < Nw; ++i) ws[i] = wrow(j + i);
      float s[16];
      ascend_host::dot::tile<D, Mx, Nw>(ws, K, xs, s);
      for (int m = 0; m < Mx; ++m) {
        for (int i = 0; i < Nw; ++i) sums[m * n + j + i] = s[m * Nw + i];
      }
    }
  }
  for (; j < n; ++j) {
    float s[Mx];
    ascend_host::dot::rows<D, Mx>(wrow(j), K, xs, s);
    for (int m = 0; m < Mx; ++m) sums[m * n + j] = s[m];
  }
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

// 16 values (masked) as float32, and float32 values stored as T (bf16: dot_kernels.h).
inline __m512 load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
inline void store16(float* p, __mmask16 mask, __m512 v) { _mm512_mask_storeu_ps(p, mask, v); }
#if defined(ASCEND_SMALL_GEMM_BF16)
inline __m512 load16(const c10::BFloat16* p, __mmask16 mask) {
  return ascend_host::dot::load_bf16x16(p, mask);
}
inline void store16(c10::BFloat16* p, __mmask16 mask, __m512 v) {
  ascend_host::dot::store_bf16x16(p, mask, v);
}
#endif

// y [rows, H] = each bucketed row through its expert's MLP, on the dot kernels.
template <typename D>
void dot_mlps(const at::Tensor& hidden, const at::Tensor& w13, const at::Tensor& w2,
              const Layout& lay, typename D::T* y) {
  using T = typename D::T;
  const int64_t H = lay.hidden, I = lay.inter, k = lay.top_k;
  const int64_t rows = lay.offsets[lay.experts];
  const T* x = hidden.const_data_ptr<T>();
  const int64_t ldx = hidden.stride(0);
  const T* gate_up = w13.const_data_ptr<T>();
  const T* down = w2.const_data_ptr<T>();
  // Scratch slot 1 (y is slot 0), uninitialized: every element is written before it is
  // read (zeroing them was a 2.5 MB memset at a 1024-token prefill, for nothing).
  T* act = ascend_host::scratch<T>(1, rows * I);
  std::vector<const T*> x_rows(rows), act_rows(rows);
  for (int64_t r = 0; r < rows; ++r) {
    x_rows[r] = x + (lay.slot_of_row[r] / k) * ldx;
    act_rows[r] = act + r * I;
  }

  // Gate/up, then swiglu: act = round(silu(round(x . gate)) * round(x . up)).
  const std::vector<Item> act_items = items(lay, I, kActColumns);
  at::parallel_for(0, static_cast<int64_t>(act_items.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const Item item = act_items[it];
      const T* w = gate_up + item.expert * 2 * I * H;
      const int64_t first = lay.offsets[item.expert];
      const int64_t width = item.end - item.begin, n = 2 * width;
      // The item's weight rows: its gate rows, then its up rows.
      const auto wrow = [&](int64_t j) {
        return w + (j < width ? item.begin + j : I + item.begin + j - width) * H;
      };
      over_row_groups<D>(first, lay.offsets[item.expert + 1], x_rows.data() + first,
                         [&](auto count, int64_t r, const T* const* xs) {
        constexpr int Mx = decltype(count)::value;
        float sums[Mx * kMaxItemRows];
        item_sums<D, Mx>(wrow, n, H, xs, sums);
        for (int m = 0; m < Mx; ++m) {
          for (int64_t c = 0; c < width; ++c) {
            const float gm = static_cast<float>(static_cast<T>(sums[m * n + c]));
            const float um = static_cast<float>(static_cast<T>(sums[m * n + width + c]));
            act[(r + m) * I + item.begin + c] = static_cast<T>(silu(gm) * um);
          }
        }
      });
    }
  });

  // Down: y = round(act . down).
  const std::vector<Item> out_items = items(lay, H, kOutColumns);
  at::parallel_for(0, static_cast<int64_t>(out_items.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t it = i0; it < i1; ++it) {
      const Item item = out_items[it];
      const T* w = down + item.expert * H * I;
      const int64_t first = lay.offsets[item.expert];
      const int64_t n = item.end - item.begin;
      const auto wrow = [&](int64_t j) { return w + (item.begin + j) * I; };
      over_row_groups<D>(first, lay.offsets[item.expert + 1], act_rows.data() + first,
                         [&](auto count, int64_t r, const T* const* xs) {
        constexpr int Mx = decltype(count)::value;
        float sums[Mx * kMaxItemRows];
        item_sums<D, Mx>(wrow, n, I, xs, sums);
        for (int m = 0; m < Mx; ++m) {
          T* yr = y + (r + m) * H + item.begin;
          for (int64_t c = 0; c < n; ++c) yr[c] = static_cast<T>(sums[m * n + c]);
        }
      });
    }
  });
}

// The experts' MLPs (the AMX tiles where they serve the layer, else the dot kernels), then
// the combine.
template <typename D>
void run(const at::Tensor& out, const at::Tensor& hidden, const at::Tensor& weights,
         const at::Tensor& w13, const at::Tensor& w2, const Layout& lay) {
  using T = typename D::T;
  const int64_t H = lay.hidden, k = lay.top_k;
  // Scratch (scratch.h) slot 0, uninitialized: the MLPs write every row the combine reads.
  T* y = ascend_host::scratch<T>(0, lay.offsets[lay.experts] * H);
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    if (ascend_host::moe::amx_takes(H, lay.inter, hidden.size(0) * hidden.stride(0))) {
      ascend_host::moe::amx_expert_mlps(hidden, w13, w2, lay, y);
    } else {
      dot_mlps<D>(hidden, w13, w2, lay, y);
    }
  } else {
    dot_mlps<D>(hidden, w13, w2, lay, y);
  }

  // Combine: out[t] = round(sum over slots j in order of y[row(t, j)] * round(w[t, j])),
  // float32 products and sums, 16 columns a vector; a left-out slot adds +0, as the loop's
  // zero row does. The explicitly rounded sums keep the compiler from fusing them with the
  // products into one rounding.
  const float* wp = weights.const_data_ptr<float>();
  T* o = out.mutable_data_ptr<T>();
  const int64_t ldo = out.stride(0);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  at::parallel_for(0, lay.tokens, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t h = 0; h < H; h += 16) {
        const __mmask16 mask =
            static_cast<__mmask16>(H - h >= 16 ? 0xFFFFu : (1u << (H - h)) - 1u);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < k; ++j) {
          const int64_t r = lay.row_of_slot[t * k + j];
          const __m512 wj = _mm512_set1_ps(static_cast<float>(static_cast<T>(wp[t * k + j])));
          const __m512 p =
              r < 0 ? _mm512_setzero_ps() : _mm512_mul_ps(load16(y + r * H + h, mask), wj);
          acc = j == 0 ? p : _mm512_add_round_ps(acc, p, kRound);
        }
        store16(o + t * ldo + h, mask, acc);
      }
    }
  });
}

#endif

bool fits(const at::Tensor& hidden, const at::Tensor& ids, const at::Tensor& weights,
          const at::Tensor& w13, const at::Tensor& w2) {
  const auto dtype = hidden.scalar_type();
  const bool kernel = ascend_host::dot::has_kernel(dtype);
  if (!kernel || hidden.dim() != 2 || ids.dim() != 2 || w13.dim() != 3 || w2.dim() != 3) {
    return false;
  }
  const int64_t T = hidden.size(0), H = hidden.size(1), E = w13.size(0), I = w2.size(2);
  for (const at::Tensor* t : {&hidden, &ids, &weights, &w13, &w2}) {
    if (!t->device().is_cpu() || t->layout() != at::kStrided) return false;
  }
  return hidden.stride(1) == 1 && w13.scalar_type() == dtype &&
         w2.scalar_type() == dtype && w13.is_contiguous() && w2.is_contiguous() &&
         w13.size(1) == 2 * I && w13.size(2) == H && w2.size(0) == E && w2.size(1) == H &&
         ids.is_contiguous() && ids.size(0) == T &&
         (ids.scalar_type() == at::kInt || ids.scalar_type() == at::kLong) &&
         weights.is_contiguous() && weights.scalar_type() == at::kFloat &&
         weights.sizes() == ids.sizes();
}

at::Tensor moe_experts(const at::Tensor& hidden, const at::Tensor& local_ids,
                       const at::Tensor& weights, const at::Tensor& w13, const at::Tensor& w2) {
  TORCH_CHECK(fits(hidden, local_ids, weights, w13, w2),
              "moe_experts: takes hidden [T, H] (rows contiguous) of a dtype this CPU's build ",
              "has a dot kernel for, local_ids [T, k] int32/int64 and weights [T, k] float32 ",
              "contiguous, w13 [E, 2I, H] and w2 [E, H, I] contiguous of hidden's dtype; got ",
              hidden.scalar_type(), " ", hidden.sizes(), ", ids ", local_ids.scalar_type(), " ",
              local_ids.sizes(), ", w13 ", w13.sizes(), ", w2 ", w2.sizes(),
              " (check native.moe_experts_takes before calling)");
  at::Tensor out = at::empty(hidden.sizes(), hidden.options());
#if defined(ASCEND_SMALL_GEMM_F32)
  Layout lay{hidden.size(0), hidden.size(1), local_ids.size(1), w13.size(0), w2.size(2),
             {}, {}, {}};
  if (local_ids.scalar_type() == at::kInt) {
    bucket(local_ids.const_data_ptr<int32_t>(), lay);
  } else {
    bucket(local_ids.const_data_ptr<int64_t>(), lay);
  }
  if (hidden.scalar_type() == at::kFloat) {
    run<ascend_host::dot::F32>(out, hidden, weights, w13, w2, lay);
  }
#if defined(ASCEND_SMALL_GEMM_BF16)
  if (hidden.scalar_type() == at::kBFloat16) {
    run<ascend_host::dot::BF16>(out, hidden, weights, w13, w2, lay);
  }
#endif
#endif
  return out;
}

// The shape function, for fake tensors (a compiled graph's tracing), in symbolic sizes:
// reading hidden.sizes() would pin a dynamic token count to the traced one.
at::Tensor moe_experts_meta(const at::Tensor& hidden, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&) {
  return at::empty_symint(hidden.sym_sizes(), hidden.options());
}

bool has_dot_kernel(at::ScalarType dtype) { return ascend_host::dot::has_kernel(dtype); }

// Whether a bf16 layer of these sizes takes the AMX tiles (for tests and diagnostics).
bool moe_experts_amx_takes(int64_t hidden, int64_t inter) {
  return ascend_host::moe::amx_takes(hidden, inter, 0);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ascend_host_native, m) {
  m.def("moe_experts(Tensor hidden, Tensor local_ids, Tensor weights, Tensor w13, Tensor w2) -> Tensor");
  m.impl("moe_experts", c10::DispatchKey::CPU, &moe_experts);
  m.impl("moe_experts", c10::DispatchKey::Meta, &moe_experts_meta);
  m.def("has_dot_kernel(ScalarType dtype) -> bool", &has_dot_kernel);
  m.def("moe_experts_amx_takes(int hidden, int inter) -> bool", &moe_experts_amx_takes);
}

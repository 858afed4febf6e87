// The host's GEMM at decode batches (3 to kPanelMaxRows rows of x; bf16 on AMX tiles: from
// 1), float32 and bf16, over the weight packed once into panels of 16 output columns
// (pack_panels).
//
// At these sizes a linear layer's work is a few microseconds to a few hundred; torch's
// oneDNN linear adds 10-20 us of its own to every call (it builds oneDNN's primitive
// descriptor anew each time), which at decode was most of the difference to vLLM's own
// CPU build (docs/benchmarks.md, Round 11). This kernel has no per-call set-up: tiles of
// up to 8 rows of x against two panels (32 columns), each output one lane of one AVX-512
// accumulator, x's values broadcast.
//
// Each step prefetches its panels' lines 4 KiB ahead (dot::kPrefetchBytes): a decode step's
// float32 GEMMs of the 87M Llama at 8 rows, 2 threads, on this project's Intel host went
// from 22.5-23 ms to 18-19.5, at 16 rows from 30-36 to 27-29.
//
// Summation order: per output, float32 multiply-add chains from zero over blocks of K (all
// of K up to 512, blocks of 512 up to 1024, of 1024 past that: k_block), the blocks' sums
// added in order (float32: one FMA a k; bf16: one VDPBF16PS a pair of k, the last pair's
// second half zero for an odd K), then the bias added, then one rounding to the output
// dtype. It does not depend on the tile an output falls in, nor on how many rows go
// together, so a row's numbers do not depend on its batch anywhere in this kernel's range
// of rows. It is also the order of oneDNN's linear on this project's host (AVX-512 Zen 4):
// the same bits as before this kernel, measured at K from 64 to 4096; a CPU where oneDNN
// blocks K otherwise (AMX, other caches) gets its own last bits, within rounding.
//
// bf16 on a CPU with AMX, K a multiple of 32: the same panels on AMX tiles instead
// (panel_gemm_amx.cpp), one chain over all of K, which gives oneDNN's AMX bits there from
// 1 to 32 rows (packed_linear sends it those: panel_gemm_rows); at 16 rows of the
// benchmark's bf16 shapes, 2 threads, 8192 x 256 (the lm_head) took 122-135 us against
// 685 us for the AVX-512 kernel at K 258 (oneDNN over its own pack: 258 us), and 450-470
// against 2950 at 64 rows.
#include "panel_gemm.h"

#include "dot_kernels.h"
#include "panel_gemm_amx.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

namespace ascend_host {
namespace {

constexpr int64_t kWidth = 16;  // columns a panel holds: one float32 AVX-512 vector
constexpr int kTileRows = 8;    // 8 rows x 2 panels: 16 accumulators, 2 weight vectors

#if defined(ASCEND_SMALL_GEMM_F32)
// Per dtype: a panel's step (one k of 16 float32 columns, or a pair of k of 16 bf16
// columns, interleaved as VDPBF16PS reads them), x's value(s) for a step broadcast, the
// multiply-add, and the bias load and output store of 16 columns.
struct F32 {
  using T = float;
  static constexpr int64_t kPerStep = 1;
  static __m512 weights(const T* step) { return _mm512_loadu_ps(step); }
  static __m512 x_at(const T* row, int64_t k) { return _mm512_set1_ps(row[k]); }
  static __m512 x_last(const T* row, int64_t k) { return x_at(row, k); }
  static __m512 madd(__m512 acc, __m512 w, __m512 x) { return _mm512_fmadd_ps(w, x, acc); }
  static __m512 bias(const T* b, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, b); }
  static void store(T* out, __mmask16 mask, __m512 v) { _mm512_mask_storeu_ps(out, mask, v); }
};

#if defined(ASCEND_SMALL_GEMM_BF16)
struct BF16 {
  using T = c10::BFloat16;
  static constexpr int64_t kPerStep = 2;
  static __m512 weights(const T* step) { return _mm512_castsi512_ps(_mm512_loadu_si512(step)); }
  static __m512 x_at(const T* row, int64_t k) {  // x[k], x[k + 1] in every 32-bit lane
    int32_t pair;
    std::memcpy(&pair, row + k, sizeof(pair));
    return _mm512_castsi512_ps(_mm512_set1_epi32(pair));
  }
  static __m512 x_last(const T* row, int64_t k) {  // x[k] and a zero: K is odd
    uint16_t bits;
    std::memcpy(&bits, row + k, sizeof(bits));
    return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int32_t>(bits)));
  }
  static __m512 madd(__m512 acc, __m512 w, __m512 x) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(w), (__m512bh)_mm512_castps_si512(x));
  }
  static __m512 bias(const T* b, __mmask16 mask) { return dot::load_bf16x16(b, mask); }
  static void store(T* out, __mmask16 mask, __m512 v) { dot::store_bf16x16(out, mask, v); }
};
#endif

template <typename D>
struct Tile {
  using T = typename D::T;
  const T* x;
  int64_t ldx;
  const T* panel;  // the first of the tile's panels
  int64_t K;
  T* out;  // the tile's first row, of n columns
  int64_t col0;  // the first output column of the tile's first panel
  int64_t n;     // the weight's output columns
  const T* bias;
};

constexpr int64_t steps_of(int64_t K, int64_t per_step) { return (K + per_step - 1) / per_step; }

// The k of one summation block: all of K up to 512, blocks of 512 up to 1024, of 1024 past
// that. oneDNN's linear (its brgemm kernels, AVX-512, this project's host) sums K so: with
// the same blocks, this kernel gives its bits (tests: test_cpu_native_packed_linear.py).
constexpr int64_t k_block(int64_t K) { return K <= 1024 ? 512 : 1024; }

template <typename D, int MR, int NP>
inline void tile(const Tile<D>& t) {
  __m512 acc[MR][NP];
  for (int m = 0; m < MR; ++m) {
    for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_setzero_ps();
  }
  const int64_t steps = steps_of(t.K, D::kPerStep), full = t.K / D::kPerStep;
  const int64_t panel_size = steps * kWidth * D::kPerStep;
  const auto step = [&](int64_t s, auto x_of) {
    __m512 w[NP];
    for (int p = 0; p < NP; ++p) {
      const typename D::T* at = t.panel + p * panel_size + s * kWidth * D::kPerStep;  // one 64-byte line
      _mm_prefetch(reinterpret_cast<const char*>(at) + dot::kPrefetchBytes, _MM_HINT_T0);
      w[p] = D::weights(at);
    }
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = x_of(t.x + m * t.ldx, s * D::kPerStep);
      for (int p = 0; p < NP; ++p) acc[m][p] = D::madd(acc[m][p], w[p], xv);
    }
  };
  // K in blocks (k_block): each block's chain from zero, the blocks' sums added in order.
  const int64_t block = k_block(t.K) / D::kPerStep;
  for (int64_t s0 = 0; s0 < steps; s0 += block) {
    __m512 total[MR][NP];
    if (s0 > 0) {
      for (int m = 0; m < MR; ++m) {
        for (int p = 0; p < NP; ++p) {
          total[m][p] = acc[m][p];
          acc[m][p] = _mm512_setzero_ps();
        }
      }
    }
    const int64_t s1 = std::min(steps, s0 + block);
    for (int64_t s = s0; s < std::min(s1, full); ++s) step(s, D::x_at);
    if (full < s1) step(full, D::x_last);
    if (s0 > 0) {
      for (int m = 0; m < MR; ++m) {
        for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_add_ps(total[m][p], acc[m][p]);
      }
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int64_t col = t.col0 + p * kWidth;
    const int64_t cols = std::min<int64_t>(kWidth, t.n - col);
    const __mmask16 mask = static_cast<__mmask16>(cols >= kWidth ? 0xFFFFu : (1u << cols) - 1u);
    const __m512 b = t.bias == nullptr ? _mm512_setzero_ps() : D::bias(t.bias + col, mask);
    for (int m = 0; m < MR; ++m) {
      const __m512 v = t.bias == nullptr ? acc[m][p] : _mm512_add_ps(acc[m][p], b);
      D::store(t.out + m * t.n + col, mask, v);
    }
  }
}

template <typename D, int NP>
void rows_of(int64_t rows, const Tile<D>& t) {
  switch (rows) {
    case 1: return tile<D, 1, NP>(t);
    case 2: return tile<D, 2, NP>(t);
    case 3: return tile<D, 3, NP>(t);
    case 4: return tile<D, 4, NP>(t);
    case 5: return tile<D, 5, NP>(t);
    case 6: return tile<D, 6, NP>(t);
    case 7: return tile<D, 7, NP>(t);
    default: return tile<D, kTileRows, NP>(t);
  }
}

template <typename D>
void run(const at::Tensor& x, const at::Tensor& panels, int64_t n,
         const std::optional<at::Tensor>& bias, at::Tensor& out) {
  using T = typename D::T;
  const int64_t M = x.size(0), K = x.size(1), P = panels.size(0);
  const T* xp = x.const_data_ptr<T>();
  const T* wp = panels.const_data_ptr<T>();
  const T* b = bias.has_value() ? bias->const_data_ptr<T>() : nullptr;
  T* o = out.mutable_data_ptr<T>();
  const int64_t panel_size = panels.size(1) * panels.size(2);
  const int64_t pairs = (P + 1) / 2;
  // At least 32K vector multiply-adds a chunk (a pair is M * K * 2 / kPerStep): a router
  // gate (one panel) or a small layer at three rows runs on the calling thread, not in a
  // parallel region whose start would cost more than it saves.
  const int64_t per_pair = std::max<int64_t>(1, M * steps_of(K, D::kPerStep) * 2);
  const int64_t grain = std::max<int64_t>(1, 32768 / per_pair);
  at::parallel_for(0, pairs, grain, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t p = 2 * q;
      for (int64_t m0 = 0; m0 < M; m0 += kTileRows) {
        const Tile<D> t{xp + m0 * x.stride(0), x.stride(0), wp + p * panel_size, K,
                        o + m0 * n, p * kWidth, n, b};
        const int64_t rows = std::min<int64_t>(kTileRows, M - m0);
        if (p + 1 < P) {
          rows_of<D, 2>(rows, t);
        } else {
          rows_of<D, 1>(rows, t);
        }
      }
    }
  });
}

// The panels of one dtype: element (p, s, c * kPerStep + j) = weight[16 p + c, s * kPerStep + j],
// zero past the weight's rows and columns.
template <typename T, int64_t kPerStep>
at::Tensor pack(const at::Tensor& weight) {
  const int64_t N = weight.size(0), K = weight.size(1), P = (N + kWidth - 1) / kWidth;
  const int64_t steps = steps_of(K, kPerStep);
  at::Tensor panels = at::zeros({P, steps, kWidth * kPerStep}, weight.options());
  const auto w = weight.accessor<T, 2>();
  T* dst = panels.mutable_data_ptr<T>();
  at::parallel_for(0, P, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t cols = std::min<int64_t>(kWidth, N - p * kWidth);
      for (int64_t c = 0; c < cols; ++c) {
        const auto row = w[p * kWidth + c];
        for (int64_t k = 0; k < K; ++k) {
          dst[((p * steps + k / kPerStep) * kWidth + c) * kPerStep + k % kPerStep] = row[k];
        }
      }
    }
  });
  return panels;
}
#endif

}  // namespace

// The same instruction sets as the dot kernels (dot_kernels.h), so the same dtypes.
bool panel_gemm_builds(c10::ScalarType dtype) { return dot::has_kernel(dtype); }

at::Tensor pack_panels(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && panel_gemm_builds(weight.scalar_type()) &&
                  weight.device().is_cpu() && weight.layout() == at::kStrided,
              "pack_panels: takes a 2-D CPU weight [N, K] of a dtype this build has the panel "
              "GEMM for (float32 with AVX-512, bf16 with AVX-512 BF16 too), got ",
              weight.sizes(), " ", weight.scalar_type(), " on ", weight.device());
#if defined(ASCEND_SMALL_GEMM_BF16)
  if (weight.scalar_type() == at::kBFloat16) return pack<c10::BFloat16, 2>(weight);
#endif
#if defined(ASCEND_SMALL_GEMM_F32)
  return pack<float, 1>(weight);
#else
  return weight;  // unreachable: no dtype builds
#endif
}

bool panel_gemm_fits(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                     const std::optional<at::Tensor>& bias) {
  const auto dtype = x2d.scalar_type();
  if (!panel_gemm_builds(dtype) || x2d.dim() != 2 || panels.dim() != 3) return false;
  const int64_t per_step = dtype == at::kBFloat16 ? 2 : 1;
  const int64_t min_rows = panel_gemm_rows(dtype, x2d.size(1)).min;
  return x2d.device().is_cpu() && x2d.size(0) >= min_rows && x2d.size(0) <= kPanelMaxRows &&
         x2d.stride(1) == 1 && panels.scalar_type() == dtype && panels.device().is_cpu() &&
         panels.is_contiguous() && panels.size(2) == kWidth * per_step &&
         panels.size(1) == (x2d.size(1) + per_step - 1) / per_step && n > 0 &&
         panels.size(0) == (n + kWidth - 1) / kWidth &&
         (!bias.has_value() || (bias->dim() == 1 && bias->is_contiguous() &&
                                bias->scalar_type() == dtype && bias->size(0) == n &&
                                bias->device().is_cpu()));
}

PanelRows panel_gemm_rows(c10::ScalarType dtype, int64_t K) {
  constexpr int64_t kAmxChainedRows = 32;
  if (dtype == at::kBFloat16 && panel_gemm_amx_takes(K)) return {1, kAmxChainedRows};
  return {kPanelMinRows, kPanelMaxRows};
}

at::Tensor panel_gemm(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                      const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(panel_gemm_fits(x2d, panels, n, bias),
              "panel_gemm: takes x [", kPanelMinRows, " (bf16 on AMX tiles: 1) to ", kPanelMaxRows,
              " rows, K] with a contiguous last dim, the panels pack_panels made of an [n, K] "
              "weight of x's dtype and a contiguous bias [n] of it, on a CPU build with the "
              "panel GEMM for that dtype");
  at::Tensor out = at::empty({x2d.size(0), n}, x2d.options());
#if defined(ASCEND_SMALL_GEMM_BF16)
  if (x2d.scalar_type() == at::kBFloat16) {
    if (panel_gemm_amx_takes(x2d.size(1))) {
      panel_gemm_amx(x2d, panels, n, bias, out);
    } else {
      run<BF16>(x2d, panels, n, bias, out);
    }
  }
#endif
#if defined(ASCEND_SMALL_GEMM_F32)
  if (x2d.scalar_type() == at::kFloat) run<F32>(x2d, panels, n, bias, out);
#endif
  return out;
}

}  // namespace ascend_host

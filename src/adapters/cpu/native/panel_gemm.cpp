// The host's float32 GEMM at decode batches (3 to kPanelMaxRows rows of x), over the weight
// packed once into panels of 16 output columns ([ceil(N / 16), K, 16]).
//
// At these sizes a linear layer's work is a few microseconds to a few hundred; torch's
// oneDNN linear adds 10-20 us of its own to every call (it builds oneDNN's primitive
// descriptor anew each time), which at decode was most of the difference to vLLM's own
// CPU build (docs/benchmarks.md, Round 11). This kernel has no per-call set-up: tiles of
// up to 8 rows of x against two panels (32 columns), each output one lane of one AVX-512
// accumulator, the rows' values broadcast from x.
//
// Summation order: per output, one float32 fused multiply-add chain over k = 0 .. K-1 from
// zero, then the bias added, then the store. It does not depend on the tile an output
// falls in, nor on how many rows go together, so a row's numbers do not depend on its
// batch anywhere in this kernel's range of rows.
#include "panel_gemm.h"

#include "dot_kernels.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstdint>
#include <optional>

namespace ascend_host {
namespace {

constexpr int64_t kWidth = 16;  // columns a panel holds: one float32 AVX-512 vector
constexpr int kTileRows = 8;    // 8 rows x 2 panels: 16 accumulators, 2 weight vectors

#if defined(ASCEND_SMALL_GEMM_F32)
struct Tile {
  const float* x;
  int64_t ldx;
  const float* panel;  // the first of the tile's panels
  int64_t K;
  float* out;
  int64_t ldo;
  int64_t col0;  // the first output column of the tile's first panel
  int64_t n;     // the weight's output columns
  const float* bias;
};

template <int MR, int NP>
inline void tile(const Tile& t) {
  __m512 acc[MR][NP];
  for (int m = 0; m < MR; ++m) {
    for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_setzero_ps();
  }
  const int64_t panel_size = t.K * kWidth;
  for (int64_t k = 0; k < t.K; ++k) {
    __m512 w[NP];
    for (int p = 0; p < NP; ++p) w[p] = _mm512_loadu_ps(t.panel + p * panel_size + k * kWidth);
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_set1_ps(t.x[m * t.ldx + k]);
      for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_fmadd_ps(w[p], xv, acc[m][p]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int64_t col = t.col0 + p * kWidth;
    const int64_t cols = std::min<int64_t>(kWidth, t.n - col);
    const __mmask16 mask = static_cast<__mmask16>(cols >= kWidth ? 0xFFFFu : (1u << cols) - 1u);
    const __m512 b = t.bias == nullptr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, t.bias + col);
    for (int m = 0; m < MR; ++m) {
      const __m512 v = t.bias == nullptr ? acc[m][p] : _mm512_add_ps(acc[m][p], b);
      _mm512_mask_storeu_ps(t.out + m * t.ldo + col, mask, v);
    }
  }
}

template <int NP>
void rows_of(int64_t rows, const Tile& t) {
  switch (rows) {
    case 1: return tile<1, NP>(t);
    case 2: return tile<2, NP>(t);
    case 3: return tile<3, NP>(t);
    case 4: return tile<4, NP>(t);
    case 5: return tile<5, NP>(t);
    case 6: return tile<6, NP>(t);
    case 7: return tile<7, NP>(t);
    default: return tile<kTileRows, NP>(t);
  }
}

void run(const at::Tensor& x, const at::Tensor& panels, int64_t n,
         const std::optional<at::Tensor>& bias, at::Tensor& out) {
  const int64_t M = x.size(0), K = x.size(1), P = panels.size(0);
  const float* xp = x.const_data_ptr<float>();
  const float* wp = panels.const_data_ptr<float>();
  const float* b = bias.has_value() ? bias->const_data_ptr<float>() : nullptr;
  float* o = out.mutable_data_ptr<float>();
  const int64_t pairs = (P + 1) / 2;
  // At least 32K vector multiply-adds a chunk (a pair is M * K * 2): a router gate (one
  // panel) or a small layer at three rows runs on the calling thread, not in a parallel
  // region whose start would cost more than it saves.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, M * K * 2));
  at::parallel_for(0, pairs, grain, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t p = 2 * q;
      for (int64_t m0 = 0; m0 < M; m0 += kTileRows) {
        const Tile t{xp + m0 * x.stride(0), x.stride(0), wp + p * K * kWidth, K,
                     o + m0 * n, n, p * kWidth, n, b};
        const int64_t rows = std::min<int64_t>(kTileRows, M - m0);
        if (p + 1 < P) {
          rows_of<2>(rows, t);
        } else {
          rows_of<1>(rows, t);
        }
      }
    }
  });
}
#endif

}  // namespace

bool panel_gemm_builds(c10::ScalarType dtype) {
#if defined(ASCEND_SMALL_GEMM_F32)
  return dtype == c10::kFloat;
#else
  (void)dtype;
  return false;
#endif
}

at::Tensor pack_panels(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.device().is_cpu() &&
                  weight.layout() == at::kStrided,
              "pack_panels: takes a 2-D float32 CPU weight [N, K], got ", weight.sizes(), " ",
              weight.scalar_type(), " on ", weight.device());
  const int64_t N = weight.size(0), K = weight.size(1), P = (N + kWidth - 1) / kWidth;
  at::Tensor panels = at::zeros({P, K, kWidth}, weight.options());
  const auto w = weight.accessor<float, 2>();
  float* dst = panels.mutable_data_ptr<float>();
  at::parallel_for(0, P, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t cols = std::min<int64_t>(kWidth, N - p * kWidth);
      for (int64_t c = 0; c < cols; ++c) {
        const auto row = w[p * kWidth + c];
        for (int64_t k = 0; k < K; ++k) dst[(p * K + k) * kWidth + c] = row[k];
      }
    }
  });
  return panels;
}

bool panel_gemm_fits(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                     const std::optional<at::Tensor>& bias) {
  return panel_gemm_builds(x2d.scalar_type()) && x2d.dim() == 2 && x2d.device().is_cpu() &&
         x2d.size(0) >= kPanelMinRows && x2d.size(0) <= kPanelMaxRows && x2d.stride(1) == 1 &&
         panels.dim() == 3 && panels.scalar_type() == at::kFloat && panels.device().is_cpu() &&
         panels.is_contiguous() && panels.size(2) == kWidth && panels.size(1) == x2d.size(1) &&
         n > 0 && panels.size(0) == (n + kWidth - 1) / kWidth &&
         (!bias.has_value() || (bias->dim() == 1 && bias->is_contiguous() &&
                                bias->scalar_type() == at::kFloat && bias->size(0) == n &&
                                bias->device().is_cpu()));
}

at::Tensor panel_gemm(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                      const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(panel_gemm_fits(x2d, panels, n, bias),
              "panel_gemm: takes float32 x [", kPanelMinRows, " to ", kPanelMaxRows,
              " rows, K] with a contiguous last dim, the weight's panels [ceil(n / 16), K, 16] "
              "(pack_panels) and a contiguous float32 bias [n], on a CPU build with AVX-512");
  at::Tensor out = at::empty({x2d.size(0), n}, x2d.options());
#if defined(ASCEND_SMALL_GEMM_F32)
  run(x2d, panels, n, bias, out);
#endif
  return out;
}

}  // namespace ascend_host

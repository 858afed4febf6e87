// The bf16 panel GEMM on AMX tiles (amx_tiles.h), where the CPU has them.
//
// The bf16 panels (pack_panels: panel p's row s holds the pairs of k 2s, 2s + 1 of its 16
// output columns) are already B in TDPBF16PS's pair layout: 16 consecutive rows of a panel
// are one tile, 32 k of 16 columns. A is 16 rows of x, 32 k, read in place (a last block of
// fewer rows from a zero-padded copy); each step multiplies two row blocks with two panels
// into four 16 x 16 float32 output tiles. One TDPBF16PS does the work of 16 VDPBF16PS of
// the AVX-512 kernel (panel_gemm.cpp), which at 16 rows and more measured up to 5x slower
// than oneDNN's own AMX kernels on this project's Intel host.
//
// Summation order: per output, one float32 chain from zero over K in TDPBF16PS steps of 32,
// then the bias added, then one rounding to bf16 (to nearest even; subnormal outputs flush
// to zero, as VCVTNEPS2BF16 does). It does not depend on the tile an output falls in nor on
// the other rows beside it, so a row's numbers do not depend on its batch.
#include "panel_gemm_amx.h"

#include "amx_tiles.h"
#include "dot_kernels.h"
#include "scratch.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ascend_host {

// (dot_kernels.h's bf16 helpers, for the tiles' edges: any CPU with AMX has their AVX-512 parts)
#if defined(ASCEND_AMX_BF16) && defined(ASCEND_SMALL_GEMM_BF16)
namespace {

using bf16 = c10::BFloat16;
constexpr int64_t kRows = amx::kRows;   // rows of x an A tile holds
constexpr int64_t kStep = amx::kStepK;  // k of one tile step
constexpr int64_t kWidth = 16;          // columns of a panel
// Each step prefetches the panel lines 4 tile steps ahead (dot::kPrefetchBytes). The tile
// loads alone read the 87M Llama's bf16 panels at 10-12 GB/s on this project's Intel host
// at 1 to 16 rows; with the prefetch 14-16 (2 threads; scripts/bench_gemm.py --small, the
// host column, and 1 to 32 rows alike).

struct Blocks {
  const bf16* a[2];  // the two row blocks' first rows (the second may be absent)
  int64_t lda[2];    // their row strides, in bytes
  int64_t rows[2];   // their real rows (0: absent)
};

// Output tile t (16 x 16 float32, `acc`) plus the bias, rounded, into out's rows of the block.
inline void store_tile(const float* acc, int64_t rows, bf16* out, int64_t ldo, int64_t col,
                       int64_t n, const bf16* bias) {
  const int64_t cols = std::min<int64_t>(kWidth, n - col);
  const __mmask16 mask = static_cast<__mmask16>(cols >= kWidth ? 0xFFFFu : (1u << cols) - 1u);
  __m512 b = _mm512_setzero_ps();
  if (bias != nullptr) b = dot::load_bf16x16(bias + col, mask);
  for (int64_t m = 0; m < rows; ++m) {
    __m512 v = _mm512_load_ps(acc + m * kWidth);
    if (bias != nullptr) v = _mm512_add_ps(v, b);
    dot::store_bf16x16(out + m * ldo + col, mask, v);
  }
}

// The lines of one tile step's NP panels (from `step`, panels panel_size apart) 4 KiB
// ahead (dot::kPrefetchBytes); a prefetch past the pack's end is harmless.
template <int NP>
inline void prefetch_ahead(const bf16* step, int64_t panel_size) {
  const char* ahead = reinterpret_cast<const char*>(step) + dot::kPrefetchBytes;
  for (int line = 0; line < kRows; ++line) {
    for (int j = 0; j < NP; ++j) {
      _mm_prefetch(ahead + j * panel_size * sizeof(bf16) + 64 * line, _MM_HINT_T0);
    }
  }
}

// Two row blocks (or one: RB) against two panels (or one: NP) over all of K.
template <int RB, int NP>
void step_tiles(const Blocks& blk, const bf16* panel, int64_t panel_size, int64_t K, bf16* out,
                int64_t ldo, int64_t col, int64_t n, const bf16* bias) {
  _tile_zero(0);
  if constexpr (NP == 2) _tile_zero(1);
  if constexpr (RB == 2) _tile_zero(2);
  if constexpr (RB == 2 && NP == 2) _tile_zero(3);
  for (int64_t k = 0; k < K; k += kStep) {
    const bf16* b0 = panel + (k / 2) * 2 * kWidth;  // rows k/2 .. k/2 + 15 of the panel
    prefetch_ahead<NP>(b0, panel_size);
    _tile_loadd(4, blk.a[0] + k, blk.lda[0]);
    _tile_loadd(6, b0, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NP == 2) {
      _tile_loadd(7, b0 + panel_size, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (RB == 2) {
      _tile_loadd(5, blk.a[1] + k, blk.lda[1]);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NP == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float acc[kRows * kWidth];
  _tile_stored(0, acc, 64);
  store_tile(acc, blk.rows[0], out, ldo, col, n, bias);
  if constexpr (NP == 2) {
    _tile_stored(1, acc, 64);
    store_tile(acc, blk.rows[0], out, ldo, col + kWidth, n, bias);
  }
  if constexpr (RB == 2) {
    bf16* out1 = out + kRows * ldo;
    _tile_stored(2, acc, 64);
    store_tile(acc, blk.rows[1], out1, ldo, col, n, bias);
    if constexpr (NP == 2) {
      _tile_stored(3, acc, 64);
      store_tile(acc, blk.rows[1], out1, ldo, col + kWidth, n, bias);
    }
  }
}

// One row block against four panels: the pair at `panel_a` and the pair at `panel_b` (two
// adjacent panels each) from two places of a thread's range, two weight streams; the
// accumulators a second row block would use hold the second pair. Each output is the same
// one chain over K that step_tiles<1, 2> gives it.
void step_tiles_two_streams(const Blocks& blk, const bf16* panel_a, int64_t col_a,
                            const bf16* panel_b, int64_t col_b, int64_t panel_size, int64_t K,
                            bf16* out, int64_t ldo, int64_t n, const bf16* bias) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t k = 0; k < K; k += kStep) {
    const bf16* a0 = panel_a + (k / 2) * 2 * kWidth;
    const bf16* b0 = panel_b + (k / 2) * 2 * kWidth;
    prefetch_ahead<2>(a0, panel_size);
    prefetch_ahead<2>(b0, panel_size);
    _tile_loadd(4, blk.a[0] + k, blk.lda[0]);
    _tile_loadd(6, a0, 64);
    _tile_loadd(7, a0 + panel_size, 64);
    _tile_loadd(5, b0, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 4, 5);
    _tile_loadd(6, b0 + panel_size, 64);
    _tile_dpbf16ps(3, 4, 6);
  }
  alignas(64) float acc[kRows * kWidth];
  const int64_t cols[4] = {col_a, col_a + kWidth, col_b, col_b + kWidth};
  _tile_stored(0, acc, 64);
  store_tile(acc, blk.rows[0], out, ldo, cols[0], n, bias);
  _tile_stored(1, acc, 64);
  store_tile(acc, blk.rows[0], out, ldo, cols[1], n, bias);
  _tile_stored(2, acc, 64);
  store_tile(acc, blk.rows[0], out, ldo, cols[2], n, bias);
  _tile_stored(3, acc, 64);
  store_tile(acc, blk.rows[0], out, ldo, cols[3], n, bias);
}

}  // namespace

bool panel_gemm_amx_takes(int64_t K) { return amx::amx_ready() && K > 0 && K % kStep == 0; }

void panel_gemm_amx(const at::Tensor& x2d, const at::Tensor& panels, int64_t n,
                    const std::optional<at::Tensor>& bias, at::Tensor& out) {
  const int64_t M = x2d.size(0), K = x2d.size(1), P = panels.size(0);
  TORCH_CHECK(panel_gemm_amx_takes(K), "panel_gemm: the AMX path got K = ", K);
  const bf16* x = x2d.const_data_ptr<bf16>();
  const int64_t ldx = x2d.stride(0);
  const bf16* w = panels.const_data_ptr<bf16>();
  const bf16* b = bias.has_value() ? bias->const_data_ptr<bf16>() : nullptr;
  bf16* o = out.mutable_data_ptr<bf16>();
  const int64_t panel_size = panels.size(1) * panels.size(2);
  // The last row block, when short of 16 rows: a copy padded with zero rows (scratch slot 0
  // of this thread; the tile loads read 16 rows).
  const int64_t blocks = (M + kRows - 1) / kRows, tail = M % kRows;
  bf16* pad = nullptr;
  if (tail != 0) {
    pad = scratch<bf16>(0, kRows * K);
    std::memset(pad, 0, kRows * K * sizeof(bf16));
    for (int64_t m = 0; m < tail; ++m) {
      std::memcpy(pad + m * K, x + (M - tail + m) * ldx, K * sizeof(bf16));
    }
  }
  const auto block = [&](int64_t i, const bf16** a, int64_t* lda, int64_t* rows) {
    const bool short_block = tail != 0 && i == blocks - 1;
    *a = short_block ? pad : x + i * kRows * ldx;
    *lda = (short_block ? K : ldx) * static_cast<int64_t>(sizeof(bf16));
    *rows = short_block ? tail : kRows;
  };
  const int64_t pairs = (P + 1) / 2;
  // A chunk is worth a thread with about 64K multiply-adds of 32 k (one TDPBF16PS: 16 x 16
  // of them) or 64 KiB of panels to read, whichever comes first: at one or two rows the
  // tiles wait on the weight, and a multiply-add count alone put the 87M Llama's qkv, o and
  // down projections on one thread at batch 1 (16.4 ms a decode step's GEMMs, 2 threads,
  // against 12.6 for the small GEMM over the same weights).
  const int64_t per_pair = std::max<int64_t>(1, M * (K / kStep) * 2 * kWidth);
  const int64_t pair_bytes = 2 * panel_size * static_cast<int64_t>(sizeof(bf16));
  const int64_t grain = std::max<int64_t>(1, std::min(65536 / per_pair, 65536 / pair_bytes));
  at::parallel_for(0, pairs, grain, [&](int64_t q0, int64_t q1) {
    amx::TileScope scope;
    const auto one_pair = [&](int64_t q) {
      const int64_t p = 2 * q;
      const bool two_panels = p + 1 < P;
      for (int64_t i = 0; i < blocks; i += 2) {
        Blocks blk{};
        block(i, &blk.a[0], &blk.lda[0], &blk.rows[0]);
        const bool two_blocks = i + 1 < blocks;
        if (two_blocks) block(i + 1, &blk.a[1], &blk.lda[1], &blk.rows[1]);
        bf16* ob = o + i * kRows * n;
        const int64_t col = p * kWidth;
        const bf16* panel = w + p * panel_size;
        if (two_blocks && two_panels) {
          step_tiles<2, 2>(blk, panel, panel_size, K, ob, n, col, n, b);
        } else if (two_blocks) {
          step_tiles<2, 1>(blk, panel, panel_size, K, ob, n, col, n, b);
        } else if (two_panels) {
          step_tiles<1, 2>(blk, panel, panel_size, K, ob, n, col, n, b);
        } else {
          step_tiles<1, 1>(blk, panel, panel_size, K, ob, n, col, n, b);
        }
      }
    };
    int64_t q = q0;
    if (blocks == 1) {
      // Up to 16 rows: the thread's pairs as two halves walked side by side (two weight
      // streams) where both pairs hold two panels. A decode step's bf16 GEMMs of the 87M
      // Llama, 2 threads, the Intel host: 4.5-4.8 -> 4.0-4.1 ms at 1 to 16 rows (17 to 32
      // rows, two row blocks, keep one stream: 5.1-5.4 ms).
      Blocks blk{};
      block(0, &blk.a[0], &blk.lda[0], &blk.rows[0]);
      const int64_t half = (q1 - q0) / 2;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t pa = 2 * (q0 + i), pb = 2 * (q0 + half + i);
        if (pb + 1 < P) {
          step_tiles_two_streams(blk, w + pa * panel_size, pa * kWidth, w + pb * panel_size,
                                 pb * kWidth, panel_size, K, o, n, n, b);
        } else {
          one_pair(q0 + i);
          one_pair(q0 + half + i);
        }
      }
      q = q0 + 2 * half;
    }
    for (; q < q1; ++q) one_pair(q);
  });
}

#else

bool panel_gemm_amx_takes(int64_t) { return false; }

void panel_gemm_amx(const at::Tensor&, const at::Tensor&, int64_t, const std::optional<at::Tensor>&,
                    at::Tensor&) {
  TORCH_CHECK(false, "panel_gemm: this build has no AMX path (check panel_gemm_amx_takes first)");
}

#endif

}  // namespace ascend_host

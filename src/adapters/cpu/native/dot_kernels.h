// The dot-product kernels the host's native GEMMs share (small_gemm.cpp, moe_experts.cpp):
// one weight row of K dotted with a few rows of x (rows), or 16 such outputs at once
// (tile), each output one float32 vector accumulator over K in chunks of 16 (float32) or
// 32 (bf16, as pairs: VDPBF16PS), then the vector's lanes summed in one fixed order. The
// order does not depend on how many rows go together, nor on which of the two computed an
// output, so a row's numbers do not depend on its batch.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>

#include <cstdint>

// float32 needs AVX-512 F; bf16 also BW (its masked tail load) and BF16 (VDPBF16PS).
// A build for a CPU without them has no kernel for that dtype: the callers fall back.
#if defined(__AVX512F__)
#define ASCEND_SMALL_GEMM_F32 1
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define ASCEND_SMALL_GEMM_BF16 1
#endif

namespace ascend_host {

namespace dot {

// How far ahead of a weight row's current chunk its stream is prefetched (4 KiB). A decode
// step's GEMMs of the 87M Llama at one row, 2 threads, on this project's Intel host: float32
// 16.5 -> 17.5-18.4 GB/s of weight, bf16 14-16 -> 16-21 (scripts/bench_gemm.py --small;
// a plain sum over memory reads 18.8). Prefetching past a weight's end is harmless.
constexpr int64_t kPrefetchBytes = 4096;

// Whether this build has a dot kernel for `dtype` (float32, bf16; see the flags above).
inline bool has_kernel(c10::ScalarType dtype) {
#if defined(ASCEND_SMALL_GEMM_BF16)
  if (dtype == c10::kBFloat16) return true;
#endif
#if defined(ASCEND_SMALL_GEMM_F32)
  return dtype == c10::kFloat;
#else
  (void)dtype;
  return false;
#endif
}

#if defined(ASCEND_SMALL_GEMM_F32)
// Chunk loads and the multiply-add of one chunk, per dtype: 16 floats, or 32 bf16 as
// pairs (VDPBF16PS: each float32 lane adds its two products).
struct F32 {
  using T = float;
  static constexpr int64_t kChunk = 16;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_tail(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static __m512 madd(__m512 acc, __m512 w, __m512 x) { return _mm512_fmadd_ps(w, x, acc); }
};

#if defined(ASCEND_SMALL_GEMM_BF16)
struct BF16 {
  using T = c10::BFloat16;
  static constexpr int64_t kChunk = 32;
  static __m512 load(const c10::BFloat16* p) { return _mm512_castsi512_ps(_mm512_loadu_si512(p)); }
  static __m512 load_tail(const c10::BFloat16* p, int64_t n) {
    return _mm512_castsi512_ps(
        _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1ull << n) - 1), p));
  }
  static __m512 madd(__m512 acc, __m512 w, __m512 x) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(w), (__m512bh)_mm512_castps_si512(x));
  }
};

// 16 bf16 values (masked) widened to float32, and 16 float32 values stored as bf16,
// rounded to nearest even (as c10's conversion does for every value but subnormals,
// which it flushes): the edges of the GEMMs' bf16 outputs and biases.
inline __m512 load_bf16x16(const c10::BFloat16* p, __mmask16 mask) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline void store_bf16x16(c10::BFloat16* p, __mmask16 mask, __m512 v) {
  _mm256_mask_storeu_epi16(p, mask, (__m256i)_mm512_cvtneps_pbh(v));
}
#endif

// S weight rows (ws[s], each K long, each its own stream) against Mx rows of x (xs[m],
// each K long): sums[s * Mx + m] = ws[s] . x_m, one float32 accumulator per output over
// K's chunks, then its lanes summed. An output's bits do not depend on S: several streams
// a thread keep more weight lines in flight than one, and the decode GEMM is bound by
// reading its weight.
template <typename D, int Mx, int S>
inline void streams(const typename D::T* const* ws, int64_t K, const typename D::T* const* xs,
                    float* sums) {
  __m512 acc[S * Mx];
  for (int i = 0; i < S * Mx; ++i) acc[i] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + D::kChunk <= K; k += D::kChunk) {
    __m512 xv[Mx];
    for (int m = 0; m < Mx; ++m) xv[m] = D::load(xs[m] + k);
    for (int s = 0; s < S; ++s) {
      _mm_prefetch(reinterpret_cast<const char*>(ws[s] + k) + kPrefetchBytes, _MM_HINT_T0);
      const __m512 wv = D::load(ws[s] + k);
      for (int m = 0; m < Mx; ++m) acc[s * Mx + m] = D::madd(acc[s * Mx + m], wv, xv[m]);
    }
  }
  if (k < K) {
    __m512 xv[Mx];
    for (int m = 0; m < Mx; ++m) xv[m] = D::load_tail(xs[m] + k, K - k);
    for (int s = 0; s < S; ++s) {
      const __m512 wv = D::load_tail(ws[s] + k, K - k);
      for (int m = 0; m < Mx; ++m) acc[s * Mx + m] = D::madd(acc[s * Mx + m], wv, xv[m]);
    }
  }
  for (int i = 0; i < S * Mx; ++i) sums[i] = _mm512_reduce_add_ps(acc[i]);
}

// One weight row w against Mx rows of x: sums[m] = w . x_m (streams' order, one stream).
template <typename D, int Mx>
inline void rows(const typename D::T* w, int64_t K, const typename D::T* const* xs,
                 float* sums) {
  const typename D::T* const ws[1] = {w};
  streams<D, Mx, 1>(ws, K, xs, sums);
}

// The lane sums of 16 accumulators in one vector, lane n holding a[n]'s: each sum in
// _mm512_reduce_add_ps's order (GCC's: the 256-bit halves added, then the 128-bit halves,
// then lanes 0 + 2 and 1 + 3, then those two), so a tile's outputs are rows' bits. Four
// levels of shuffles and adds over all 16 at once instead of 16 separate reductions.
__attribute__((always_inline)) inline __m512 sum16(const __m512* a) {
  __m512 p[8], q[4], r[2];
  for (int i = 0; i < 8; ++i) {  // lanes 0-7: a[2i]'s halves added, 8-15: a[2i + 1]'s
    p[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44));
  }
  for (int i = 0; i < 4; ++i) {  // 128-bit lane l: a[4i + l]'s quarters added
    q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0xDD),
                         _mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0x88));
  }
  for (int i = 0; i < 2; ++i) {  // lane l: a[8i + l]'s (0 + 2, 1 + 3), a[8i + 4 + l]'s
    r[i] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Lane 4l + j holds a[4j + l]'s sum; permuted so lane n holds a[n]'s.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, s);
}

// Nw weight rows (ws[j], each K long) against Mx rows of x, Mx * Nw = 16:
// sums[m * Nw + j] = ws[j] . x_m, in rows' order (the same chunks, then sum16), so the bits
// do not depend on which of the two computed a row. Each chunk of x and of the weights is
// loaded once for Nw or Mx multiply-adds, and the 16 lane sums share their shuffles: at
// many rows an expert (a prefill), rows' one-row streams paid a load and a reduction per
// output.
template <typename D, int Mx, int Nw>
inline void tile(const typename D::T* const* ws, int64_t K, const typename D::T* const* xs,
                 float* sums) {
  static_assert(Mx * Nw == 16, "a tile is 16 accumulators");
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + D::kChunk <= K; k += D::kChunk) {
    __m512 wv[Nw];
    for (int j = 0; j < Nw; ++j) wv[j] = D::load(ws[j] + k);
    for (int m = 0; m < Mx; ++m) {
      const __m512 xv = D::load(xs[m] + k);
      for (int j = 0; j < Nw; ++j) acc[m * Nw + j] = D::madd(acc[m * Nw + j], wv[j], xv);
    }
  }
  if (k < K) {
    __m512 wv[Nw];
    for (int j = 0; j < Nw; ++j) wv[j] = D::load_tail(ws[j] + k, K - k);
    for (int m = 0; m < Mx; ++m) {
      const __m512 xv = D::load_tail(xs[m] + k, K - k);
      for (int j = 0; j < Nw; ++j) acc[m * Nw + j] = D::madd(acc[m * Nw + j], wv[j], xv);
    }
  }
  _mm512_storeu_ps(sums, sum16(acc));
}

// a + b rounded once, never fused with the product that made b (the build's default
// -ffp-contract=fast fuses a plain a + x * y into one FMA, a rounding fewer).
inline float add_unfused(float a, float b) {
  return _mm_cvtss_f32(_mm_add_round_ss(_mm_set_ss(a), _mm_set_ss(b),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#endif

}  // namespace dot
}  // namespace ascend_host

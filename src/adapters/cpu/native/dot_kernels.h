// The dot-product kernels the host's native GEMMs share (small_gemm.cpp, moe_experts.cpp):
// one weight row of K dotted with a few rows of x, each output one float32 vector
// accumulator over K in chunks of 16 (float32) or 32 (bf16, as pairs: VDPBF16PS), then
// the vector's lanes summed. The order does not depend on how many rows go together, so
// a row's numbers do not depend on its batch.
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
#endif

// One weight row w (K long) against Mx rows of x (xs[m], each K long): sums[m] = w . x_m.
// One weight stream: tiles of several weight rows measured slower here at one or two rows.
template <typename D, int Mx>
inline void rows(const typename D::T* w, int64_t K, const typename D::T* const* xs,
                 float* sums) {
  __m512 acc[Mx];
  for (int m = 0; m < Mx; ++m) acc[m] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + D::kChunk <= K; k += D::kChunk) {
    const __m512 wv = D::load(w + k);
    for (int m = 0; m < Mx; ++m) acc[m] = D::madd(acc[m], wv, D::load(xs[m] + k));
  }
  if (k < K) {
    const __m512 wv = D::load_tail(w + k, K - k);
    for (int m = 0; m < Mx; ++m) acc[m] = D::madd(acc[m], wv, D::load_tail(xs[m] + k, K - k));
  }
  for (int m = 0; m < Mx; ++m) sums[m] = _mm512_reduce_add_ps(acc[m]);
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

// Paged decode attention on the host: one new token per sequence, K/V read in place.
//
// One task per (sequence, kv head) pair; each computes its `group` query heads in one
// pass over the valid context positions, read straight from the paged cache planes
// through the block table (no gather copy). float32 scores, softmax and accumulation,
// output rounded once to the query dtype (the NPU attention op's precision contract,
// and the torch path's: SDPA on float32 copies). Positions go in chunks of 512 with an
// online softmax across chunks, as torch's CPU flash attention splits them.
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include "dot_kernels.h"
#include "vec_exp.h"

#include <algorithm>
#include <bit>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t kChunk = 512;  // torch's CPU flash kv split for contexts >= 512

inline float bits_to_float(uint32_t u) { return std::bit_cast<float>(u); }

inline uint32_t float_to_bits(float f) { return std::bit_cast<uint32_t>(f); }

// exp for x <= 0 (softmax arguments) where the build has no AVX-512 (exp16 of vec_exp.h
// otherwise): a branch-free Cephes polynomial; relative error about 2e-7, 0 below -87.
// n = round(x / ln 2) by adding 1.5 * 2^23 (round to nearest in float), read back from
// that sum's low bits.
inline float exp_nonpositive(float x) {
  const float xc = x < -87.0f ? -87.0f : x;
  const float shifted = xc * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - 0x4B400000u);
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>(static_cast<uint32_t>(ni + 127) << 23);
  return x < -87.0f ? 0.0f : y * two_n;
}

inline void load_row(const float* src, float* dst, int64_t d) {
  std::memcpy(dst, src, d * sizeof(float));
}

inline void load_row(const c10::BFloat16* src, float* dst, int64_t d) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= d; i += 16) {
    const __m512i w = _mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))), 16);
    _mm512_storeu_si512(dst + i, w);
  }
#endif
  for (; i < d; ++i) dst[i] = bits_to_float(static_cast<uint32_t>(s[i]) << 16);
}

inline void store_row(const float* src, float scale, float* dst, int64_t d) {
  for (int64_t i = 0; i < d; ++i) dst[i] = src[i] * scale;
}

// bf16 of src * scale, rounded to nearest even; a NaN becomes 0x7FC0. 16 columns a vector
// (the scalar loop was a quarter of a prefill row's time), the same integer steps.
inline void store_row(const float* src, float scale, c10::BFloat16* dst, int64_t d) {
  uint16_t* o = reinterpret_cast<uint16_t*>(dst);
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 scale16 = _mm512_set1_ps(scale);
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF);
  const __m512i quiet_nan = _mm512_set1_epi32(0x7FC0);
  for (; i + 16 <= d; i += 16) {
    const __m512 f = _mm512_mul_ps(_mm512_loadu_ps(src + i), scale16);
    __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    u = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, lsb)), 16);
    u = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), u, quiet_nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm512_cvtepi32_epi16(u));
  }
#endif
  for (; i < d; ++i) {
    const float f = src[i] * scale;
    uint32_t u = float_to_bits(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    o[i] = f != f ? uint16_t{0x7FC0} : static_cast<uint16_t>(u >> 16);
  }
}

// q . k over the head dim in 16 lanes, then halves added down to one (GCC vector
// extensions: the compiler's own reductions spilled their lanes and summed them serially).
using V16 = float __attribute__((vector_size(64), aligned(4), may_alias));
using V8 = float __attribute__((vector_size(32)));
using V4 = float __attribute__((vector_size(16)));

inline float hsum(V16 lanes) {
  const V8 h8 = __builtin_shufflevector(lanes, lanes, 0, 1, 2, 3, 4, 5, 6, 7) +
                __builtin_shufflevector(lanes, lanes, 8, 9, 10, 11, 12, 13, 14, 15);
  const V4 h4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3) +
                __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

inline float dot(const float* __restrict a, const float* __restrict b, int64_t d) {
  V16 lanes = {};
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    lanes += *reinterpret_cast<const V16*>(a + i) * *reinterpret_cast<const V16*>(b + i);
  }
  float sum = hsum(lanes);
  for (; i < d; ++i) sum += a[i] * b[i];
  return sum;
}

// Scores s[i] = (q . k_i) * scale of one query head over n float rows (any head size).
inline void scores(const float* q, const float* k, int64_t n, int64_t head_size, float scale,
                   float* s) {
  for (int64_t i = 0; i < n; ++i) s[i] = dot(q, k + i * head_size, head_size) * scale;
}

// acc += sum_i w[i] * v_i over n float rows of one query head (any head size).
inline void weigh(const float* w, const float* v, int64_t n, int64_t head_size, float* acc) {
  for (int64_t i = 0; i < n; ++i) {
    const float* vi = v + i * head_size;
    for (int64_t d = 0; d < head_size; ++d) acc[d] += w[i] * vi[d];
  }
}

// -- fixed head sizes: K and V read straight from the cache, the group's heads in tiles --
//
// For head sizes 32, 64 and 128 each K and V row is converted to float32 in registers once
// and used by a tile of up to kMaxTile query heads of the group (accumulators held in
// registers), instead of being copied to float32 scratch and read again per head. The
// arithmetic per head is the same, in the same order (the q . k lanes, hsum, the V sums
// in position order), so the results are bit for bit those of the scratch path.

using U16x16 = uint16_t __attribute__((vector_size(32), aligned(2)));
using U32x16 = uint32_t __attribute__((vector_size(64)));

inline V16 load16(const float* p) { return *reinterpret_cast<const V16*>(p); }

inline V16 load16(const c10::BFloat16* p) {
#if defined(__AVX512F__)
  // One widening move (GCC splits the generic conversion below into 256-bit halves).
  const __m512i w = _mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
  return __builtin_bit_cast(V16, w);
#else
  const U16x16 h = *reinterpret_cast<const U16x16*>(p);
  const U32x16 w = __builtin_convertvector(h, U32x16) << 16;
  return __builtin_bit_cast(V16, w);
#endif
}

// Calls f(i, row) for positions [c0, c0 + n) of one sequence and kv head, walking the
// block table (no division per position).
template <typename T, typename F>
inline void for_rows(const T* base, int64_t s0, int64_t s1, const int64_t* table, int64_t ts1,
                     int64_t block_size, int64_t c0, int64_t n, F&& f) {
  int64_t bi = c0 / block_size, off = c0 % block_size;
  const T* block = base + table[bi * ts1] * s0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, block + off * s1);
    if (++off == block_size && i + 1 < n) {
      off = 0;
      block = base + table[++bi * ts1] * s0;
    }
  }
}

// s[t * stride + i] = (q_t . k_i) * scale for the kT heads of a tile.
template <typename T, int64_t kD, int64_t kT>
inline void scores_tile(const float* q, const T* k_head, int64_t ks0, int64_t ks1,
                        const int64_t* table, int64_t ts1, int64_t block_size, int64_t c0,
                        int64_t n, float scale, float* s, int64_t stride) {
  constexpr int64_t kB = kD / 16;
  V16 qv[kT][kB];
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t j = 0; j < kB; ++j) qv[t][j] = load16(q + t * kD + 16 * j);
#if defined(ASCEND_SMALL_GEMM_F32)
  // Each head's lanes of 16 positions, summed together by dot::sum16 (hsum's order, one
  // shuffle tree for 16 sums instead of 16 trees; the same bits). bf16, 8/2 heads of 32,
  // 16 sequences of 100 positions, 2 threads: 25 -> 19 us a call; 1024 prefill rows of
  // 1-64 positions: 608 -> 524 us.
  __m512 lanes16[kT][16];
  const __m512 scale16 = _mm512_set1_ps(scale);
  auto flush = [&](int64_t first, int64_t count) {
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t r = count; r < 16; ++r) lanes16[t][r] = _mm512_setzero_ps();
      const __m512 sums = _mm512_mul_ps(ascend_host::dot::sum16(lanes16[t]), scale16);
      _mm512_storeu_ps(s + t * stride + first, sums);  // whole: see score_stride
    }
  };
#endif
  for_rows(k_head, ks0, ks1, table, ts1, block_size, c0, n, [&](int64_t i, const T* row) {
    V16 kv[kB];
    for (int64_t j = 0; j < kB; ++j) kv[j] = load16(row + 16 * j);
    for (int64_t t = 0; t < kT; ++t) {
      V16 lanes = qv[t][0] * kv[0];
      for (int64_t j = 1; j < kB; ++j) lanes += qv[t][j] * kv[j];
#if defined(ASCEND_SMALL_GEMM_F32)
      lanes16[t][i % 16] = __builtin_bit_cast(__m512, lanes);
#else
      s[t * stride + i] = hsum(lanes) * scale;
#endif
    }
#if defined(ASCEND_SMALL_GEMM_F32)
    if (i % 16 == 15) flush(i - 15, 16);
#endif
  });
#if defined(ASCEND_SMALL_GEMM_F32)
  if (n % 16 != 0) flush(n - n % 16, n % 16);
#endif
}

// acc_t += sum_i w[t * stride + i] * v_i for the kT heads of a tile.
template <typename T, int64_t kD, int64_t kT>
inline void weigh_tile(const float* w, int64_t stride, const T* v_head, int64_t vs0,
                       int64_t vs1, const int64_t* table, int64_t ts1, int64_t block_size,
                       int64_t c0, int64_t n, float* acc) {
  constexpr int64_t kB = kD / 16;
  V16 a[kT][kB];
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t j = 0; j < kB; ++j) a[t][j] = load16(acc + t * kD + 16 * j);
  for_rows(v_head, vs0, vs1, table, ts1, block_size, c0, n, [&](int64_t i, const T* row) {
    V16 vv[kB];
    for (int64_t j = 0; j < kB; ++j) vv[j] = load16(row + 16 * j);
    for (int64_t t = 0; t < kT; ++t) {
      const float wi = w[t * stride + i];
      for (int64_t j = 0; j < kB; ++j) a[t][j] += wi * vv[j];
    }
  });
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t j = 0; j < kB; ++j) *reinterpret_cast<V16*>(acc + t * kD + 16 * j) = a[t][j];
}

// Heads per tile: the accumulators of a tile (kT x kD / 16 vectors) and one row stay in
// the 32 vector registers of AVX-512.
template <int64_t kD>
constexpr int64_t kMaxTile = kD <= 64 ? 4 : 2;

// Runs f(std::integral_constant<kT>, g0) over the group's heads in tiles of kMaxTile,
// the last tile smaller.
template <int64_t kD, typename F>
inline void over_tiles(int64_t group, F&& f) {
  constexpr int64_t kMax = kMaxTile<kD>;
  int64_t g0 = 0;
  for (; g0 + kMax <= group; g0 += kMax) f(std::integral_constant<int64_t, kMax>{}, g0);
  const int64_t rest = group - g0;
  if (rest == 1) f(std::integral_constant<int64_t, 1>{}, g0);
  if constexpr (kMax > 2) {
    if (rest == 2) f(std::integral_constant<int64_t, 2>{}, g0);
    if (rest == 3) f(std::integral_constant<int64_t, 3>{}, g0);
  }
}

// -- a head's softmax over a chunk of scores: the max, exp(s - max) in place, their sum --
//
// In AVX-512 lanes of 16 positions (e^x: vec_exp.h), the last group masked, the sum's lanes
// added by hsum's tree: an order of this file's own, the same for a row whatever its batch
// (the compiler's vectorised loops these replace fell to scalar chains at the few positions
// of a prefill's first rows, and their order was the vectoriser's). Elsewhere the plain
// loops.
#if defined(__AVX512F__)
inline __mmask16 lanes_from(int64_t i, int64_t n) {
  return n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
}

// The largest of s[0, n) (a NaN score is passed over, as the scalar comparison does).
inline float chunk_max_of(const float* s, int64_t n) {
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; i += 16) {
    m = _mm512_mask_max_ps(m, lanes_from(i, n), _mm512_loadu_ps(s + i), m);
  }
  return _mm512_reduce_max_ps(m);
}

// s[i] = exp(s[i] - max) for i < n (lanes past n up to the next 16 become 0; the row's
// score_stride holds them), and the sum of those.
inline float exp_and_sum(float* s, int64_t n, float max) {
  const __m512 mx = _mm512_set1_ps(max);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 e = _mm512_maskz_mov_ps(
        lanes_from(i, n), ascend_host::exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), mx)));
    _mm512_storeu_ps(s + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  return hsum(__builtin_bit_cast(V16, sum));
}
#else
inline float chunk_max_of(const float* s, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = s[i] > m ? s[i] : m;
  return m;
}

inline float exp_and_sum(float* s, int64_t n, float max) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    s[i] = exp_nonpositive(s[i] - max);
    sum += s[i];
  }
  return sum;
}
#endif

// A head's row of scores in the scratch: the chunk rounded up to 16 positions, so the
// scores' flush and exp_and_sum store whole lanes of 16 without reaching the next head's
// row (the lanes past the chunk's positions are masked wherever they are read).
constexpr int64_t score_stride(int64_t chunk) { return (chunk + 15) / 16 * 16; }

// Per-thread scratch of decode_kernel (uninitialised: every use writes before it reads).
// `rows`: float32 copies of K and V rows, which only the generic head-size path makes.
struct Scratch {
  Scratch(int64_t group, int64_t head_size, int64_t chunk, bool rows)
      : q(std::make_unique_for_overwrite<float[]>(group * head_size)),
        acc(std::make_unique_for_overwrite<float[]>(group * head_size)),
        s(std::make_unique_for_overwrite<float[]>(group * score_stride(chunk))),
        k(std::make_unique_for_overwrite<float[]>(rows ? chunk * head_size : 0)),
        v(std::make_unique_for_overwrite<float[]>(rows ? chunk * head_size : 0)),
        run_max(std::make_unique_for_overwrite<float[]>(group)),
        run_sum(std::make_unique_for_overwrite<float[]>(group)) {}
  std::unique_ptr<float[]> q, acc, s, k, v, run_max, run_sum;
};

// One (sequence, kv head) pair: its `group` query heads over `len` positions.
// kD > 0: the head size fixed at compile time (rows in registers); 0: `head_size`.
template <typename T, int64_t kD>
void attend_pair(const T* const* q_rows, T* const* o_rows, const T* k_head, const T* v_head,
                 int64_t ks0, int64_t ks1, int64_t vs0, int64_t vs1, const int64_t* table,
                 int64_t ts1, int64_t block_size, int64_t len, int64_t group, int64_t head_size_rt,
                 int64_t chunk, float scale, Scratch& w) {
  const int64_t head_size = kD > 0 ? kD : head_size_rt;
  float* q = w.q.get();
  float* acc = w.acc.get();
  float* s = w.s.get();
  float* run_max = w.run_max.get();
  float* run_sum = w.run_sum.get();
  for (int64_t g = 0; g < group; ++g) load_row(q_rows[g], q + g * head_size, head_size);
  std::fill(acc, acc + group * head_size, 0.0f);
  std::fill(run_max, run_max + group, -std::numeric_limits<float>::infinity());
  std::fill(run_sum, run_sum + group, 0.0f);
  const int64_t ss = score_stride(chunk);
  for (int64_t c0 = 0; c0 < len; c0 += chunk) {
    const int64_t n = std::min(chunk, len - c0);
    if constexpr (kD > 0) {
      over_tiles<kD>(group, [&](auto tile, int64_t g0) {
        scores_tile<T, kD, decltype(tile)::value>(q + g0 * kD, k_head, ks0, ks1, table, ts1,
                                                  block_size, c0, n, scale, s + g0 * ss, ss);
      });
    } else {
      // Any other head size: float32 copies of the chunk's K and V rows, then per head.
      float* k = w.k.get();
      float* v = w.v.get();
      for_rows(k_head, ks0, ks1, table, ts1, block_size, c0, n, [&](int64_t i, const T* row) {
        load_row(row, k + i * head_size, head_size);
      });
      for_rows(v_head, vs0, vs1, table, ts1, block_size, c0, n, [&](int64_t i, const T* row) {
        load_row(row, v + i * head_size, head_size);
      });
    }
    for (int64_t g = 0; g < group; ++g) {
      float* __restrict sg = s + g * ss;
      if constexpr (kD == 0) scores(q + g * head_size, w.k.get(), n, head_size, scale, sg);
      const float old_max = run_max[g];
      const float new_max = std::max(old_max, chunk_max_of(sg, n));
      const float chunk_sum = exp_and_sum(sg, n, new_max);
      run_max[g] = new_max;
      float* __restrict ag = acc + g * head_size;
      if (c0 == 0) {
        // exp(-inf - max) is 0 and the sum 0, so chunk_sum + 0 * 0 is chunk_sum: the first
        // chunk (every chunk of a context up to 512) skips that exp, a libm call a head.
        run_sum[g] = chunk_sum;
      } else {
        const float alpha = std::exp(old_max - new_max);
        run_sum[g] = chunk_sum + alpha * run_sum[g];
        for (int64_t d = 0; d < head_size; ++d) ag[d] *= alpha;
      }
      if constexpr (kD == 0) weigh(sg, w.v.get(), n, head_size, ag);
    }
    if constexpr (kD > 0) {
      over_tiles<kD>(group, [&](auto tile, int64_t g0) {
        weigh_tile<T, kD, decltype(tile)::value>(s + g0 * ss, ss, v_head, vs0, vs1, table,
                                                 ts1, block_size, c0, n, acc + g0 * kD);
      });
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    // An empty context (length 0) writes zeros rather than 0/0.
    const float inv = len > 0 ? 1.0f / run_sum[g] : 0.0f;
    store_row(acc + g * head_size, inv, o_rows[g], head_size);
  }
}

template <typename T>
void decode_kernel(const at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                   const at::Tensor& value_cache, const at::Tensor& block_table,
                   const at::Tensor& seq_lens, double scale_d) {
  const int64_t num_seqs = query.size(0);
  const int64_t num_q_heads = query.size(1);
  const int64_t head_size = query.size(2);
  const int64_t block_size = key_cache.size(1);
  const int64_t num_kv_heads = key_cache.size(2);
  const int64_t group = num_q_heads / num_kv_heads;
  const float scale = static_cast<float>(scale_d);
  int64_t max_len = 1;
  for (int64_t b = 0; b < num_seqs; ++b) max_len = std::max(max_len, seq_lens.data_ptr<int64_t>()[b]);
  const int64_t chunk = std::min(kChunk, max_len);  // scratch rows: no more than any sequence needs

  const T* q_base = query.data_ptr<T>();
  const T* k_base = key_cache.data_ptr<T>();
  const T* v_base = value_cache.data_ptr<T>();
  T* o_base = out.data_ptr<T>();
  const int64_t* table = block_table.data_ptr<int64_t>();
  const int64_t* lens = seq_lens.data_ptr<int64_t>();
  const int64_t qs0 = query.stride(0), qs1 = query.stride(1);
  const int64_t os0 = out.stride(0), os1 = out.stride(1);
  const int64_t ks0 = key_cache.stride(0), ks1 = key_cache.stride(1), ks2 = key_cache.stride(2);
  const int64_t vs0 = value_cache.stride(0), vs1 = value_cache.stride(1),
                vs2 = value_cache.stride(2);
  const int64_t ts0 = block_table.stride(0), ts1 = block_table.stride(1);

  at::parallel_for(0, num_seqs * num_kv_heads, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(group, head_size, chunk,
                    head_size != 32 && head_size != 64 && head_size != 128);
    std::vector<const T*> q_rows(group);
    std::vector<T*> o_rows(group);
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t b = pair / num_kv_heads;
      const int64_t h = pair % num_kv_heads;
      for (int64_t g = 0; g < group; ++g) {
        q_rows[g] = q_base + b * qs0 + (h * group + g) * qs1;
        o_rows[g] = o_base + b * os0 + (h * group + g) * os1;
      }
      auto run = [&](auto fixed) {
        attend_pair<T, decltype(fixed)::value>(
            q_rows.data(), o_rows.data(), k_base + h * ks2, v_base + h * vs2, ks0, ks1, vs0,
            vs1, table + b * ts0, ts1, block_size, lens[b], group, head_size, chunk, scale,
            scratch);
      };
      if (head_size == 32) {
        run(std::integral_constant<int64_t, 32>{});
      } else if (head_size == 64) {
        run(std::integral_constant<int64_t, 64>{});
      } else if (head_size == 128) {
        run(std::integral_constant<int64_t, 128>{});
      } else {
        run(std::integral_constant<int64_t, 0>{});
      }
    }
  });
}

void decode_attention(const at::Tensor& out, const at::Tensor& query, const at::Tensor& key_cache,
                      const at::Tensor& value_cache, const at::Tensor& block_table,
                      const at::Tensor& seq_lens, double scale) {
  TORCH_CHECK(query.dim() == 3 && out.dim() == 3 && key_cache.dim() == 4 &&
                  value_cache.dim() == 4,
              "decode_attention: query/out [B, Hq, D], caches [blocks, block_size, Hk, D]");
  TORCH_CHECK(query.scalar_type() == key_cache.scalar_type() &&
                  query.scalar_type() == value_cache.scalar_type() &&
                  query.scalar_type() == out.scalar_type(),
              "decode_attention: query, caches and out must share one dtype");
  TORCH_CHECK(query.stride(2) == 1 && out.stride(2) == 1 && key_cache.stride(3) == 1 &&
                  value_cache.stride(3) == 1,
              "decode_attention: the head dim must be contiguous");
  TORCH_CHECK(block_table.scalar_type() == at::kLong && seq_lens.scalar_type() == at::kLong &&
                  seq_lens.is_contiguous(),
              "decode_attention: block_table and seq_lens must be int64");
  TORCH_CHECK(query.size(1) % key_cache.size(2) == 0 && query.size(2) == key_cache.size(3) &&
                  out.sizes() == query.sizes() && seq_lens.size(0) >= query.size(0) &&
                  block_table.size(0) >= query.size(0),
              "decode_attention: shapes disagree");
  if (query.scalar_type() == at::kBFloat16) {
    decode_kernel<c10::BFloat16>(out, query, key_cache, value_cache, block_table, seq_lens, scale);
  } else {
    TORCH_CHECK(query.scalar_type() == at::kFloat, "decode_attention: bf16 or float32 only");
    decode_kernel<float>(out, query, key_cache, value_cache, block_table, seq_lens, scale);
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ascend_host_native, m) {
  m.def(
      "decode_attention(Tensor(a!) out, Tensor query, Tensor key_cache, Tensor value_cache, "
      "Tensor block_table, Tensor seq_lens, float scale) -> ()");
  m.impl("decode_attention", c10::DispatchKey::CPU, &decode_attention);
}

// The host GEMM at decode sizes (up to 16 rows of x): each weight row streamed once from
// the dense [N, K] weight, dotted with the rows of x in groups of up to four, float32
// accumulation. packed_linear takes it at one or two rows, and past that while the
// product is small (small_gemm_preferred); oneDNN serves the rest.
//
// At one or two rows a linear layer is bound by reading its weight; over a decode step
// of the 87M Llama, oneDNN's kernels read the packed weights at 15-19 GB/s on this
// project's host, this kernel's one sequential stream per thread at 20-26 GB/s
// (scripts/bench_gemm.py --small). Summation order (dot_kernels.h), the same at any row
// count so a sequence's numbers do not depend on its batch: per output, one float32
// vector accumulator over K, its lanes summed, then the bias added, then one rounding to
// the output dtype.
#include "small_gemm.h"

#include "dot_kernels.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstdint>
#include <optional>

namespace ascend_host {

#if defined(ASCEND_SMALL_GEMM_F32)
namespace {

using dot::F32;
#if defined(ASCEND_SMALL_GEMM_BF16)
using dot::BF16;
#endif

// Rows of x in groups of up to kGroup per weight-row stream; each output's sums in
// dot_kernels.h's order, whatever the group, so the bits do not depend on the row count.
constexpr int kGroup = 4;

template <typename D, int Mx>
inline void group(const typename D::T* w, int64_t K, const typename D::T* const* xs,
                  float add, typename D::T* o, int64_t ldo) {
  float sums[Mx];
  dot::rows<D, Mx>(w, K, xs, sums);
  for (int m = 0; m < Mx; ++m) o[m * ldo] = static_cast<typename D::T>(sums[m] + add);
}

template <typename D>
void run(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
         at::Tensor& out) {
  using T = typename D::T;
  const int64_t N = weight.size(0), K = weight.size(1), M = x.size(0);
  const T* w = weight.const_data_ptr<T>();
  const T* xp = x.const_data_ptr<T>();
  const T* b = bias.has_value() ? bias->const_data_ptr<T>() : nullptr;
  T* o = out.mutable_data_ptr<T>();
  const int64_t ldx = x.stride(0), ldo = out.stride(0);
  const T* xs[kSmallGemmMaxRows];
  for (int64_t m = 0; m < M; ++m) xs[m] = xp + m * ldx;
  // Fewer rows of N a task as rows grow: a task's work stays about 64 weight rows' worth.
  const int64_t grain = std::max<int64_t>(8, 64 / ((M + kGroup - 1) / kGroup));
  at::parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float add = b == nullptr ? 0.0f : static_cast<float>(b[n]);
      for (int64_t m = 0; m < M; m += kGroup) {
        const T* wn = w + n * K;
        T* on = o + m * ldo + n;
        switch (std::min<int64_t>(kGroup, M - m)) {
          case 1: group<D, 1>(wn, K, xs + m, add, on, ldo); break;
          case 2: group<D, 2>(wn, K, xs + m, add, on, ldo); break;
          case 3: group<D, 3>(wn, K, xs + m, add, on, ldo); break;
          default: group<D, 4>(wn, K, xs + m, add, on, ldo); break;
        }
      }
    }
  });
}

}  // namespace
#endif

bool small_gemm_fits(const at::Tensor& x2d, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias) {
  const auto dtype = weight.scalar_type();
  bool kernel = false;
#if defined(ASCEND_SMALL_GEMM_F32)
  kernel = kernel || dtype == at::kFloat;
#endif
#if defined(ASCEND_SMALL_GEMM_BF16)
  kernel = kernel || dtype == at::kBFloat16;
#endif
  return kernel && x2d.dim() == 2 && x2d.scalar_type() == dtype && x2d.size(0) >= 1 &&
         x2d.size(0) <= kSmallGemmMaxRows && x2d.stride(1) == 1 && weight.dim() == 2 &&
         weight.layout() == at::kStrided && weight.is_contiguous() &&
         x2d.size(1) == weight.size(1) && x2d.device().is_cpu() && weight.device().is_cpu() &&
         (!bias.has_value() ||
          (bias->dim() == 1 && bias->is_contiguous() && bias->scalar_type() == dtype &&
           bias->size(0) == weight.size(0)));
}

bool small_gemm_preferred(const at::Tensor& x2d, const at::Tensor& weight) {
  const int64_t rows = x2d.size(0);
  return rows <= 2 || (rows <= kSmallGemmMaxRows && rows * weight.numel() <= kSmallGemmMaxWork);
}

at::Tensor small_gemm(const at::Tensor& x2d, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(small_gemm_fits(x2d, weight, bias),
              "small_gemm: takes 1 to ", kSmallGemmMaxRows, " rows of x and a dense contiguous "
              "weight of x's dtype, of a dtype this CPU's build has the kernel for");
  at::Tensor out = at::empty({x2d.size(0), weight.size(0)}, x2d.options());
#if defined(ASCEND_SMALL_GEMM_F32)
  if (weight.scalar_type() == at::kFloat) run<F32>(x2d, weight, bias, out);
#endif
#if defined(ASCEND_SMALL_GEMM_BF16)
  if (weight.scalar_type() == at::kBFloat16) run<BF16>(x2d, weight, bias, out);
#endif
  return out;
}

}  // namespace ascend_host

// The host GEMM at decode sizes (one or two rows of x): each weight row streamed once
// from the dense [N, K] weight, dotted with every row of x, float32 accumulation.
//
// At one or two rows a linear layer is bound by reading its weight; over a decode step
// of the 87M Llama, oneDNN's kernels read the packed weights at 20-24 GB/s on this
// project's Intel host, this kernel's four streams per thread at 35-37 GB/s
// (scripts/bench_gemm.py --small). Summation order (dot_kernels.h), the same at one and
// two rows so a sequence's numbers do not depend on its batch: per output, one float32
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
// Weight streams per thread: each thread's rows as this many contiguous parts, walked side
// by side (dot::streams). A decode step's GEMMs of the 87M Llama at one row, 2 threads, on
// this project's Intel host: float32 12.7 -> 8.8-8.9 ms (one stream -> four; six and eight
// no faster), bf16 6.9 -> 4.7-4.9 (scripts/bench_gemm.py --small).
constexpr int kStreams = 4;
#if defined(ASCEND_SMALL_GEMM_BF16)
using dot::BF16;
#endif

template <typename D, int Mx>
void run(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
         at::Tensor& out) {
  using T = typename D::T;
  const int64_t N = weight.size(0), K = weight.size(1);
  const T* w = weight.const_data_ptr<T>();
  const T* xp = x.const_data_ptr<T>();
  const T* b = bias.has_value() ? bias->const_data_ptr<T>() : nullptr;
  T* o = out.mutable_data_ptr<T>();
  const int64_t ldx = x.stride(0), ldo = out.stride(0);
  auto store = [&](int64_t n, const float* sums) {
    const float add = b == nullptr ? 0.0f : static_cast<float>(b[n]);
    for (int m = 0; m < Mx; ++m) o[m * ldo + n] = static_cast<T>(sums[m] + add);
  };
  at::parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
    const T* xs[Mx];
    for (int m = 0; m < Mx; ++m) xs[m] = xp + m * ldx;
    const int64_t part = (n1 - n0) / kStreams;
    for (int64_t i = 0; i < part; ++i) {
      const T* ws[kStreams];
      for (int s = 0; s < kStreams; ++s) ws[s] = w + (n0 + s * part + i) * K;
      float sums[kStreams * Mx];
      dot::streams<D, Mx, kStreams>(ws, K, xs, sums);
      for (int s = 0; s < kStreams; ++s) store(n0 + s * part + i, sums + s * Mx);
    }
    for (int64_t n = n0 + kStreams * part; n < n1; ++n) {
      float sums[Mx];
      dot::rows<D, Mx>(w + n * K, K, xs, sums);
      store(n, sums);
    }
  });
}

template <typename D>
void run_rows(const at::Tensor& x, const at::Tensor& weight,
              const std::optional<at::Tensor>& bias, at::Tensor& out) {
  static_assert(kSmallGemmMaxRows == 2, "one instantiation per row count");
  if (x.size(0) == 1) {
    run<D, 1>(x, weight, bias, out);
  } else {
    run<D, 2>(x, weight, bias, out);
  }
}

}  // namespace
#endif

bool small_gemm_fits(const at::Tensor& x2d, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias) {
  const auto dtype = weight.scalar_type();
  const bool kernel = dot::has_kernel(dtype);
  return kernel && x2d.dim() == 2 && x2d.scalar_type() == dtype && x2d.size(0) >= 1 &&
         x2d.size(0) <= kSmallGemmMaxRows && x2d.stride(1) == 1 && weight.dim() == 2 &&
         weight.layout() == at::kStrided && weight.is_contiguous() &&
         x2d.size(1) == weight.size(1) && x2d.device().is_cpu() && weight.device().is_cpu() &&
         (!bias.has_value() ||
          (bias->dim() == 1 && bias->is_contiguous() && bias->scalar_type() == dtype &&
           bias->size(0) == weight.size(0)));
}

at::Tensor small_gemm(const at::Tensor& x2d, const at::Tensor& weight,
                      const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(small_gemm_fits(x2d, weight, bias),
              "small_gemm: takes 1 to ", kSmallGemmMaxRows, " rows of x and a dense contiguous "
              "weight of x's dtype, of a dtype this CPU's build has the kernel for");
  at::Tensor out = at::empty({x2d.size(0), weight.size(0)}, x2d.options());
#if defined(ASCEND_SMALL_GEMM_F32)
  if (weight.scalar_type() == at::kFloat) run_rows<F32>(x2d, weight, bias, out);
#endif
#if defined(ASCEND_SMALL_GEMM_BF16)
  if (weight.scalar_type() == at::kBFloat16) run_rows<BF16>(x2d, weight, bias, out);
#endif
  return out;
}

}  // namespace ascend_host

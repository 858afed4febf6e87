// The host's MoE routing for plain top-k (no expert groups, no correction bias) as one
// native op: the same bits as CpuMoeOps.route, with the Python between its ops gone.
//
// Softmax scoring, where torch dispatches its CPU kernels to the vector width this file is
// built for (AVX-512 or AVX2), runs in one pass over the rows: torch's softmax-over-the-last-
// dimension steps with the vector helpers and the exp of torch's own headers (the max, the
// exp of the differences, their sum, one reciprocal, one product), then torch's top-k loop
// from its header (TopKImpl.h) for the choice and the tie order. The same instructions on the
// same values, so the same bits; a test checks it on ties, NaNs and widths that are not a
// whole vector. Elsewhere (sigmoid scoring, another capability) the scores come from torch's
// ops (float32 logits, softmax or sigmoid, topk).
//
// The renormalization divides by (sum of the token's k weights + 1e-20) in float32, and the
// scaling multiplies in float32, as the Python's tensor-scalar ops do; the sum is torch's
// (at::sum) past two weights, where its order could differ from a plain loop's. At decode the
// torch-op route ran five ops (about 9 us a layer with two threads); one pass is one op.
#if defined(__AVX512F__)
#define CPU_CAPABILITY AVX512
#define CPU_CAPABILITY_AVX512
#define ROUTE_VECTOR_CAPABILITY "AVX512"
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2
#define ROUTE_VECTOR_CAPABILITY "AVX2"
#endif

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/library.h>

#ifdef ROUTE_VECTOR_CAPABILITY
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/TopKImpl.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

namespace {

#ifdef ROUTE_VECTOR_CAPABILITY
using Vec = at::vec::Vectorized<float>;

// Whether torch's CPU kernels run at the vector width this file is built for: the one-pass
// softmax gives torch's bits only there (ATEN_CPU_CAPABILITY can lower torch's). Read once.
bool torch_runs_this_width() {
  static const bool same = at::get_cpu_capability() == ROUTE_VECTOR_CAPABILITY;
  return same;
}

// torch's softmax of one float32 row over its last dimension (_vec_softmax_lastdim), in the
// same helpers: the max, exp(x - max), their sum in reduce_all's order, one reciprocal.
//
// A row shorter than a vector (8 experts, say) takes reduce_all's lane-by-lane path there,
// about 60 ns a reduction; here its two reductions are scalar loops of the same values: the
// max in any order (a zero's sign cannot change x - max, and a row with a NaN takes torch's
// reduction, for its NaN), the sum left to right from the first element, as that path adds.
void softmax_row(const float* in, float* out, int64_t size) {
  if (size < Vec::size()) {
    float max = in[0];
    bool nan = std::isnan(in[0]);
    for (int64_t e = 1; e < size; ++e) {
      nan |= std::isnan(in[e]);
      max = std::max(max, in[e]);
    }
    if (!nan) {
      at::vec::map([max](Vec x) { return (x - Vec(max)).exp(); }, out, in, size);
      float sum = out[0];
      for (int64_t e = 1; e < size; ++e) sum = sum + out[e];
      sum = 1 / sum;
      at::vec::map([sum](Vec x) { return x * Vec(sum); }, out, out, size);
      return;
    }
  }
  const float max = at::vec::reduce_all<float>(
      [](Vec& x, Vec& y) { return at::vec::maximum(x, y); }, in, size);
  at::vec::map([max](Vec x) { return (x - Vec(max)).exp(); }, out, in, size);
  float sum = at::vec::reduce_all<float>([](Vec x, Vec y) { return x + y; }, out, size);
  sum = 1 / sum;
  at::vec::map([sum](Vec x) { return x * Vec(sum); }, out, out, size);
}

// Each row's softmax scores and their top k (values, int64 indices, largest first), rows in
// parallel as torch's softmax splits them. Logits float32, bf16 or half with contiguous
// rows; the narrow types widen exactly, as .to(float) does.
void softmax_top_k(const at::Tensor& logits, int64_t top_k, float* values, int64_t* indices) {
  const int64_t tokens = logits.size(0);
  const int64_t experts = logits.size(1);
  const int64_t row_stride = logits.stride(0);
  const at::ScalarType dtype = logits.scalar_type();
  const char* base = static_cast<const char*>(logits.const_data_ptr());
  const int64_t item = logits.element_size();
  const int64_t grain = std::max<int64_t>(at::internal::GRAIN_SIZE / (16 * experts), 1);
  at::parallel_for(0, tokens, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> row(dtype == at::kFloat ? 0 : experts);
    std::vector<float> scores((end - begin) * experts);
    for (int64_t t = begin; t < end; ++t) {
      const char* source = base + t * row_stride * item;
      const float* in = reinterpret_cast<const float*>(source);
      if (dtype == at::kBFloat16) {
        const auto* narrow = reinterpret_cast<const c10::BFloat16*>(source);
        for (int64_t e = 0; e < experts; ++e) row[e] = static_cast<float>(narrow[e]);
        in = row.data();
      } else if (dtype == at::kHalf) {
        const auto* narrow = reinterpret_cast<const c10::Half*>(source);
        for (int64_t e = 0; e < experts; ++e) row[e] = static_cast<float>(narrow[e]);
        in = row.data();
      }
      softmax_row(in, scores.data() + (t - begin) * experts, experts);
    }
    char* data[3] = {reinterpret_cast<char*>(values + begin * top_k),
                     reinterpret_cast<char*>(indices + begin * top_k),
                     reinterpret_cast<char*>(scores.data())};
    const int64_t strides[3] = {top_k * static_cast<int64_t>(sizeof(float)),
                                top_k * static_cast<int64_t>(sizeof(int64_t)),
                                experts * static_cast<int64_t>(sizeof(float))};
    at::native::topk_impl_loop<float, float>(1, 1, 1, top_k, experts, /*largest=*/true,
                                             /*sorted=*/true, data, strides, end - begin);
  });
}
#endif

// Whether the one-pass softmax takes these logits (else torch's ops score them).
bool one_pass_takes(const at::Tensor& logits, bool sigmoid) {
#ifdef ROUTE_VECTOR_CAPABILITY
  const at::ScalarType dtype = logits.scalar_type();
  return !sigmoid && torch_runs_this_width() && logits.device().is_cpu() &&
         (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf) &&
         logits.stride(1) == 1;
#else
  (void)logits;
  (void)sigmoid;
  return false;
#endif
}

std::tuple<at::Tensor, at::Tensor> moe_route(const at::Tensor& router_logits, int64_t top_k,
                                             bool sigmoid, bool renormalize,
                                             double routed_scaling_factor) {
  TORCH_CHECK(router_logits.dim() == 2 && top_k >= 1 && top_k <= router_logits.size(1),
              "moe_route: logits [T, E] and 1 <= top_k <= E");
  const int64_t tokens = router_logits.size(0);
  at::Tensor weights;
  at::Tensor ids = at::empty({tokens, top_k}, router_logits.options().dtype(at::kInt));
  int32_t* id = ids.data_ptr<int32_t>();
  if (one_pass_takes(router_logits, sigmoid)) {
#ifdef ROUTE_VECTOR_CAPABILITY
    weights = at::empty({tokens, top_k}, router_logits.options().dtype(at::kFloat));
    std::vector<int64_t> indices(tokens * top_k);
    softmax_top_k(router_logits, top_k, weights.data_ptr<float>(), indices.data());
    for (int64_t i = 0; i < tokens * top_k; ++i) id[i] = static_cast<int32_t>(indices[i]);
#endif
  } else {
    const at::Tensor logits = router_logits.to(at::kFloat);
    const at::Tensor scores = sigmoid ? at::sigmoid(logits) : at::_softmax(logits, -1, false);
    auto [values, indices] = at::topk(scores, top_k, -1, true, true);
    weights = values.contiguous();
    ids.copy_(indices);
  }
  float* w = weights.data_ptr<float>();
  if (renormalize) {
    // One or two weights add the same in any order; past two, torch's sum keeps its order.
    at::Tensor sums;
    if (top_k > 2) sums = at::sum(weights, -1).contiguous();
    const float* s = top_k > 2 ? sums.const_data_ptr<float>() : nullptr;
    const float eps = static_cast<float>(1e-20);
    for (int64_t t = 0; t < tokens; ++t) {
      const float* row = w + t * top_k;
      const float sum = s ? s[t] : (top_k == 1 ? row[0] : row[0] + row[1]);
      const float denominator = sum + eps;
      for (int64_t j = 0; j < top_k; ++j) w[t * top_k + j] = w[t * top_k + j] / denominator;
    }
  }
  if (routed_scaling_factor != 1.0) {
    const float scale = static_cast<float>(routed_scaling_factor);
    for (int64_t i = 0; i < tokens * top_k; ++i) w[i] = w[i] * scale;
  }
  return {weights, ids};
}

// The shape function, for fake tensors (a compiled graph's tracing), in symbolic sizes:
// reading the token count would pin a dynamic batch dimension to the traced one.
std::tuple<at::Tensor, at::Tensor> moe_route_meta(const at::Tensor& router_logits, int64_t top_k,
                                                  bool, bool, double) {
  TORCH_CHECK(router_logits.dim() == 2 && top_k >= 1, "moe_route: logits [T, E] and top_k >= 1");
  const std::vector<c10::SymInt> sizes{router_logits.sym_size(0), c10::SymInt(top_k)};
  const auto options = router_logits.options();
  return {at::empty_symint(sizes, options.dtype(at::kFloat)),
          at::empty_symint(sizes, options.dtype(at::kInt))};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ascend_host_native, m) {
  m.def(
      "moe_route(Tensor router_logits, int top_k, bool sigmoid, bool renormalize, "
      "float routed_scaling_factor) -> (Tensor, Tensor)");
  m.impl("moe_route", c10::DispatchKey::CPU, &moe_route);
  m.impl("moe_route", c10::DispatchKey::Meta, &moe_route_meta);
}

// The host's MoE routing for plain top-k (no expert groups, no correction bias) as one
// native op: the same bits as CpuMoeOps.route, with the Python between its ops gone.
//
// The scores come from torch's own kernels (float32 logits, softmax or sigmoid, topk), so
// the chosen experts and their scores are torch's; topk's values are the scores a gather
// at its indices would read. The renormalization sums each token's k weights with torch's
// sum, then divides by (sum + 1e-20) in float32, and the scaling multiplies in float32,
// as the Python's tensor-scalar ops do. At decode the Python route ran eight ops and
// their Python (about 40 us a layer on the host); this runs four ops and two loops.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace {

std::tuple<at::Tensor, at::Tensor> moe_route(const at::Tensor& router_logits, int64_t top_k,
                                             bool sigmoid, bool renormalize,
                                             double routed_scaling_factor) {
  TORCH_CHECK(router_logits.dim() == 2 && top_k >= 1 && top_k <= router_logits.size(1),
              "moe_route: logits [T, E] and 1 <= top_k <= E");
  const at::Tensor logits = router_logits.to(at::kFloat);
  const at::Tensor scores = sigmoid ? at::sigmoid(logits) : at::_softmax(logits, -1, false);
  auto [values, indices] = at::topk(scores, top_k, -1, true, true);
  at::Tensor weights = values.contiguous();
  const int64_t tokens = weights.size(0);
  float* w = weights.data_ptr<float>();
  if (renormalize) {
    const at::Tensor sums = at::sum(weights, -1).contiguous();
    const float* s = sums.const_data_ptr<float>();
    const float eps = static_cast<float>(1e-20);
    for (int64_t t = 0; t < tokens; ++t) {
      const float denominator = s[t] + eps;
      for (int64_t j = 0; j < top_k; ++j) w[t * top_k + j] = w[t * top_k + j] / denominator;
    }
  }
  if (routed_scaling_factor != 1.0) {
    const float scale = static_cast<float>(routed_scaling_factor);
    for (int64_t i = 0; i < tokens * top_k; ++i) w[i] = w[i] * scale;
  }
  return {weights, indices.to(at::kInt)};
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

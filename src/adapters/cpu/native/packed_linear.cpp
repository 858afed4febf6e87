// The host's unquantized GEMM as one native op: past two rows of x, oneDNN's linear over
// a weight packed once into oneDNN's blocked layout, the pack cached here; at one or two
// rows, the small GEMM over the dense weight (small_gemm.cpp).
//
// Past two rows, the same two torch ops the Python kernel of ascend_host::packed_linear
// calls (mkldnn::_reorder_linear_weight once per weight, mkldnn::_linear_pointwise per
// call), so the numbers are the same bits; what goes is the Python around them: the compiled
// graph calls this op 49 times a step (the 87M Llama), and at a 64 x 64 bf16 weight a
// call measured 39 us through the Python kernel against 24 us here (2 threads).
//
// The cache is keyed by the weight's TensorImpl, checked against a weak reference (an
// address reused by another tensor is not a hit) and against the weight's version
// counter (an in-place reload repacks). An inference tensor keeps no version counter,
// so its pack is not cached: it is packed on every call, as in the Python kernel.
// Entries whose weight is gone are dropped when a new pack is stored.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/library.h>

#include "small_gemm.h"

#include <mutex>
#include <optional>
#include <unordered_map>

namespace {

struct Pack {
  c10::weak_intrusive_ptr<c10::TensorImpl> weight;
  int64_t version;
  at::Tensor packed;
};

std::mutex cache_mutex;
std::unordered_map<const c10::TensorImpl*, Pack> cache;

at::Tensor reorder(const at::Tensor& weight) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkldnn::_reorder_linear_weight", "")
                       .typed<at::Tensor(const at::Tensor&, std::optional<int64_t>)>();
  return op.call(weight, std::nullopt);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& packed,
                  const std::optional<at::Tensor>& bias) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            c10::string_view, c10::List<std::optional<at::Scalar>>,
                            std::optional<c10::string_view>)>();
  return op.call(x, packed, bias, "none", c10::List<std::optional<at::Scalar>>(), "");
}

// The weight in oneDNN's layout, from the cache or packed now. Also an op of its own
// (pack_linear_weight), so a loader can pack every weight at once, in module order,
// before the first forward, and eager callers share the compiled graph's packs.
at::Tensor packed_for(const at::Tensor& weight) {
  if (weight.is_inference()) return reorder(weight);
  const c10::TensorImpl* key = weight.unsafeGetTensorImpl();
  const int64_t version = weight._version();
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto found = cache.find(key);
  if (found != cache.end() && found->second.version == version) {
    auto alive = found->second.weight.lock();
    if (alive.get() == key) return found->second.packed;
  }
  at::Tensor packed = reorder(weight);
  for (auto it = cache.begin(); it != cache.end();) {
    it = it->second.weight.expired() ? cache.erase(it) : std::next(it);
  }
  cache.insert_or_assign(
      key, Pack{c10::weak_intrusive_ptr<c10::TensorImpl>(weight.getIntrusivePtr()), version, packed});
  return packed;
}

// One or two rows of x (decode at batch 1 or 2): the small GEMM over the dense weight,
// bound by reading the weight, which it streams faster than oneDNN's kernels read the
// pack (small_gemm.cpp). More rows, and inputs it does not take: oneDNN over the pack.
at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias) {
  if (x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1) && x.numel() > 0) {
    const at::Tensor x2d = x.reshape({-1, x.size(-1)});
    if (ascend_host::small_gemm_fits(x2d, weight, bias)) {
      auto sizes = x.sizes().vec();
      sizes.back() = weight.size(0);
      return ascend_host::small_gemm(x2d, weight, bias).view(sizes);
    }
  }
  return linear(x, packed_for(weight), bias);
}

// The shape function, for fake tensors (Dynamo's tracing) and the meta device. In
// symbolic sizes: reading x.sizes() would pin a dynamic batch dimension to the traced one.
at::Tensor packed_linear_meta(const at::Tensor& x, const at::Tensor& weight,
                              const std::optional<at::Tensor>& /*bias*/) {
  auto sizes = x.sym_sizes().vec();
  sizes.back() = weight.sym_size(0);
  return at::empty_symint(sizes, x.options());
}

// How many packs the cache holds (for tests: a dropped weight's pack goes).
int64_t packed_linear_cache_size() {
  std::lock_guard<std::mutex> lock(cache_mutex);
  return static_cast<int64_t>(cache.size());
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ascend_host_native, m) {
  m.def("packed_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("pack_linear_weight(Tensor weight) -> Tensor");
  m.def("packed_linear_cache_size() -> int", &packed_linear_cache_size);
  m.impl("pack_linear_weight", c10::DispatchKey::CPU, &packed_for);
  m.def("small_gemm(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.impl("small_gemm", c10::DispatchKey::CPU, &ascend_host::small_gemm);
  m.impl("packed_linear", c10::DispatchKey::CPU, &packed_linear);
  m.impl("packed_linear", c10::DispatchKey::Meta, &packed_linear_meta);
}

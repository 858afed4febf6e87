// The host's unquantized GEMM as one native op, by the rows of x:
// - one or two: the small GEMM over the dense weight (small_gemm.cpp);
// - 3 to kPanelMaxRows: the panel GEMM over the weight packed once into panels
//   (panel_gemm.cpp), with no per-call set-up; bf16 where the CPU has AMX and K is a
//   multiple of 32: the panels on AMX tiles from 1 to 32 rows instead (panel_gemm_amx.cpp,
//   oneDNN's bits there: panel_gemm_rows); past those, oneDNN's linear over the dense
//   weight (which reorders it inside, the same bits as over its own pack);
// - a weight that is not contiguous, or a build without the panel GEMM for its dtype:
//   oneDNN's linear over the weight packed once into oneDNN's blocked layout.
// Each weight has one pack, cached here: panels where the panel GEMM takes the weight,
// oneDNN's layout otherwise.
//
// oneDNN's calls are the two torch ops the Python kernel of ascend_host::packed_linear
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

#include "panel_gemm.h"
#include "panel_gemm_amx.h"
#include "small_gemm.h"

#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

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

// Whether a weight's pack is panels (the panel GEMM's) rather than oneDNN's layout.
bool takes_panels(const at::Tensor& weight) {
  return ascend_host::panel_gemm_builds(weight.scalar_type()) && weight.dim() == 2 &&
         weight.layout() == at::kStrided && weight.is_contiguous() && weight.device().is_cpu();
}

at::Tensor pack(const at::Tensor& weight) {
  return takes_panels(weight) ? ascend_host::pack_panels(weight) : reorder(weight);
}

// The weight's pack (panels or oneDNN's layout: takes_panels), from the cache or packed
// now. Also an op of its own (pack_linear_weight), so a loader can pack every weight at
// once, in module order, before the first forward, and eager callers share the compiled
// graph's packs.
at::Tensor packed_for(const at::Tensor& weight) {
  if (weight.is_inference()) return pack(weight);
  const c10::TensorImpl* key = weight.unsafeGetTensorImpl();
  const int64_t version = weight._version();
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto found = cache.find(key);
  if (found != cache.end() && found->second.version == version) {
    auto alive = found->second.weight.lock();
    if (alive.get() == key) return found->second.packed;
  }
  at::Tensor packed = pack(weight);
  for (auto it = cache.begin(); it != cache.end();) {
    it = it->second.weight.expired() ? cache.erase(it) : std::next(it);
  }
  cache.insert_or_assign(
      key, Pack{c10::weak_intrusive_ptr<c10::TensorImpl>(weight.getIntrusivePtr()), version, packed});
  return packed;
}

// By the rows of x (see the top of this file): the small GEMM, the panel GEMM, oneDNN.
at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias) {
  if (x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1) && x.numel() > 0) {
    const at::Tensor x2d = x.reshape({-1, x.size(-1)});
    auto sizes = x.sizes().vec();
    sizes.back() = weight.size(0);
    const int64_t rows = x2d.size(0);
    const auto panel_rows = ascend_host::panel_gemm_rows(x2d.scalar_type(), x2d.size(1));
    const bool panels_here = takes_panels(weight);
    if (panels_here && rows >= panel_rows.min && rows <= panel_rows.max) {
      const at::Tensor panels = packed_for(weight);
      if (ascend_host::panel_gemm_fits(x2d, panels, weight.size(0), bias)) {
        return ascend_host::panel_gemm(x2d, panels, weight.size(0), bias).view(sizes);
      }
    }
    if (rows < panel_rows.min && ascend_host::small_gemm_fits(x2d, weight, bias)) {
      return ascend_host::small_gemm(x2d, weight, bias).view(sizes);
    }
    if (panels_here) {
      return linear(x, weight, bias);  // its pack is panels: oneDNN reads the dense weight
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

// The rows packed_linear sends to the panel GEMM for x of `dtype` and K columns, as
// [first, last] (for tests: panel_gemm_rows).
std::vector<int64_t> panel_gemm_rows(c10::ScalarType dtype, int64_t k) {
  const auto rows = ascend_host::panel_gemm_rows(dtype, k);
  return {rows.min, rows.max};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ascend_host_native, m) {
  m.def("packed_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("pack_linear_weight(Tensor weight) -> Tensor");
  m.def("packed_linear_cache_size() -> int", &packed_linear_cache_size);
  m.impl("pack_linear_weight", c10::DispatchKey::CPU, &packed_for);
  m.def("small_gemm(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.impl("small_gemm", c10::DispatchKey::CPU, &ascend_host::small_gemm);
  m.def("pack_panels(Tensor weight) -> Tensor");
  m.impl("pack_panels", c10::DispatchKey::CPU, &ascend_host::pack_panels);
  m.def("panel_gemm(Tensor x, Tensor panels, int n, Tensor? bias) -> Tensor");
  m.impl("panel_gemm", c10::DispatchKey::CPU, &ascend_host::panel_gemm);
  m.def("panel_gemm_amx_takes(int k) -> bool", &ascend_host::panel_gemm_amx_takes);
  m.def("panel_gemm_rows(ScalarType dtype, int k) -> int[]", &panel_gemm_rows);
  m.impl("packed_linear", c10::DispatchKey::CPU, &packed_linear);
  m.impl("packed_linear", c10::DispatchKey::Meta, &packed_linear_meta);
}

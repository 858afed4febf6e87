// The KV cache write on the host: each new token's K and V rows copied to its slot.
//
// slot s of a cache [blocks, block_size, Hk, D] is (block s / block_size, offset
// s % block_size); slot -1 (a padding token) is skipped, and tokens past
// len(slot_mapping) are ignored: the semantics of the torch path (two index_put_ calls)
// and of the NPU's reshape-and-cache op. A plain copy, so the result is bit for bit the
// torch path's. One loop over the tokens: at decode there are few rows, and a parallel
// region would cost more than the copy. Returns false, writing nothing, where the copy
// does not apply (see `fits`); a slot past the cache is an error.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>

namespace {

template <typename Slot>
void copy_rows(const at::Tensor& src, const at::Tensor& cache, const Slot* slots, int64_t n) {
  const int64_t heads = src.size(1);
  const int64_t row_bytes = src.size(2) * src.element_size();
  const int64_t block_size = cache.size(1);
  const int64_t num_slots = cache.size(0) * block_size;
  const auto* s = static_cast<const char*>(src.data_ptr());
  auto* c = static_cast<char*>(cache.data_ptr());
  const int64_t es = src.element_size();
  const int64_t ss0 = src.stride(0) * es, ss1 = src.stride(1) * es;
  const int64_t cs0 = cache.stride(0) * es, cs1 = cache.stride(1) * es,
                cs2 = cache.stride(2) * es;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = static_cast<int64_t>(slots[i]);
    if (slot < 0) continue;
    TORCH_CHECK(slot < num_slots, "write_kv_cache: slot ", slot, " is past the cache's ",
                num_slots, " slots");
    const int64_t block = slot / block_size;
    const int64_t offset = slot - block * block_size;
    const char* from = s + i * ss0;
    char* to = c + block * cs0 + offset * cs1;
    for (int64_t h = 0; h < heads; ++h) std::memcpy(to + h * cs2, from + h * ss1, row_bytes);
  }
}

// Whether the copy applies: [T, Hk, D] rows of the cache's dtype into a [blocks,
// block_size, Hk, D] cache, head dims contiguous. Otherwise (a cast, another layout) the
// caller keeps its index_put_ path.
bool fits(const at::Tensor& src, const at::Tensor& cache, int64_t n) {
  return src.dim() == 3 && cache.dim() == 4 && src.device().is_cpu() &&
         cache.device().is_cpu() && src.scalar_type() == cache.scalar_type() &&
         src.stride(2) == 1 && cache.stride(3) == 1 && src.size(1) == cache.size(2) &&
         src.size(2) == cache.size(3) && src.size(0) >= n;
}

bool write_kv_cache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                    const at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  const bool long_slots = slot_mapping.scalar_type() == at::kLong;
  if (!slot_mapping.is_contiguous() || !slot_mapping.device().is_cpu() ||
      !(long_slots || slot_mapping.scalar_type() == at::kInt)) {
    return false;
  }
  const int64_t n = slot_mapping.numel();
  if (!fits(key, key_cache, n) || !fits(value, value_cache, n)) return false;
  if (long_slots) {
    const auto* slots = slot_mapping.data_ptr<int64_t>();
    copy_rows(key, key_cache, slots, n);
    copy_rows(value, value_cache, slots, n);
  } else {
    const auto* slots = slot_mapping.data_ptr<int32_t>();
    copy_rows(key, key_cache, slots, n);
    copy_rows(value, value_cache, slots, n);
  }
  return true;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ascend_host_native, m) {
  m.def(
      "write_kv_cache(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
      "Tensor slot_mapping) -> bool");
  m.impl("write_kv_cache", c10::DispatchKey::CPU, &write_kv_cache);
}

// Sleep mode's device memory on an NPU: a pluggable allocator for torch_npu's MemPool whose
// allocations are virtual address ranges backed by physical memory that can be unmapped
// and mapped again AT THE SAME ADDRESS (ACL's virtual-memory API), so graphs captured over
// the weights and the KV cache stay valid across a sleep.
//
// Built on an NPU host against CANN's acl/acl.h and libascendcl (adapters/npu/vmm_pool.py
// builds it); the tests build it against the emulated ACL of tests/support/
// emulated_npu_device. It has never run on Ascend hardware.
//
// C ABI, called by torch_npu (vmm_pool_malloc/vmm_pool_free: NPUPluggableAllocator's
// signatures) and by ctypes (the rest); ACL error codes are returned as they come.

#include <acl/acl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

namespace {

struct Range {
  size_t size = 0;
  int device = 0;
  int tag = 0;
  aclrtDrvMemHandle handle = nullptr;  // the physical memory mapped now (null: unmapped)
};

std::mutex g_mutex;
std::map<uintptr_t, Range> g_ranges;  // keyed by virtual address
int g_tag = 0;                        // the tag of allocations made now
int g_last_error = 0;                 // the last ACL error of vmm_pool_malloc/_free

aclrtPhysicalMemProp device_memory(int device) {
  aclrtPhysicalMemProp prop = {};
  prop.handleType = ACL_MEM_HANDLE_TYPE_NONE;
  prop.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
  prop.memAttr = ACL_HBM_MEM_HUGE;
  prop.location.id = static_cast<uint32_t>(device);
  prop.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
  prop.reserve = 0;
  return prop;
}

// A thread that never selected the device (an allocator callback) gets it selected.
aclError ensure_device(int device) {
  aclrtContext context = nullptr;
  if (aclrtGetCurrentContext(&context) == ACL_SUCCESS && context != nullptr) return ACL_SUCCESS;
  return aclrtSetDevice(device);
}

// New physical memory for the range, mapped at its address.
aclError map_range(uintptr_t address, Range& range) {
  aclError error = ensure_device(range.device);
  if (error != ACL_SUCCESS) return error;
  aclrtPhysicalMemProp prop = device_memory(range.device);
  aclrtDrvMemHandle handle = nullptr;
  error = aclrtMallocPhysical(&handle, range.size, &prop, 0);
  if (error != ACL_SUCCESS) return error;
  error = aclrtMapMem(reinterpret_cast<void*>(address), range.size, 0, handle, 0);
  if (error != ACL_SUCCESS) {
    aclrtFreePhysical(handle);
    return error;
  }
  range.handle = handle;
  return ACL_SUCCESS;
}

// The range's physical memory unmapped and freed; its addresses stay reserved.
aclError unmap_range(uintptr_t address, Range& range) {
  if (range.handle == nullptr) return ACL_SUCCESS;
  aclError error = ensure_device(range.device);
  if (error != ACL_SUCCESS) return error;
  error = aclrtUnmapMem(reinterpret_cast<void*>(address));
  if (error != ACL_SUCCESS) return error;
  error = aclrtFreePhysical(range.handle);
  range.handle = nullptr;
  return error;
}

}  // namespace

extern "C" {

void* vmm_pool_malloc(size_t size, int device, aclrtStream /*stream*/) {
  if (size == 0) return nullptr;
  if (ensure_device(device) != ACL_SUCCESS) return nullptr;
  aclrtPhysicalMemProp prop = device_memory(device);
  size_t granularity = 0;
  aclError error =
      aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &granularity);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (error != ACL_SUCCESS || granularity == 0) {
    g_last_error = error != ACL_SUCCESS ? error : -1;
    return nullptr;
  }
  Range range;
  range.size = (size + granularity - 1) / granularity * granularity;
  range.device = device;
  range.tag = g_tag;
  void* address = nullptr;
  error = aclrtReserveMemAddress(&address, range.size, 0, nullptr, 0);
  if (error != ACL_SUCCESS) {
    g_last_error = error;
    return nullptr;
  }
  const auto key = reinterpret_cast<uintptr_t>(address);
  error = map_range(key, range);
  if (error != ACL_SUCCESS) {
    aclrtReleaseMemAddress(address);
    g_last_error = error;
    return nullptr;  // torch_npu reports an out-of-memory error
  }
  g_ranges[key] = range;
  return address;
}

void vmm_pool_free(void* ptr, size_t /*size*/, int /*device*/, aclrtStream /*stream*/) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_ranges.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == g_ranges.end()) return;
  aclError error = unmap_range(it->first, it->second);
  if (error == ACL_SUCCESS) error = aclrtReleaseMemAddress(ptr);
  if (error != ACL_SUCCESS) g_last_error = error;
  g_ranges.erase(it);
}

// The tag of allocations made from now on; returns the previous one.
int vmm_pool_set_tag(int tag) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int previous = g_tag;
  g_tag = tag;
  return previous;
}

// Up to `capacity` ranges of `tag` (addresses, sizes, whether mapped); returns how many
// there are in all.
int64_t vmm_pool_ranges(int tag, uint64_t* addresses, uint64_t* sizes, int32_t* mapped,
                        int64_t capacity) {
  std::lock_guard<std::mutex> lock(g_mutex);
  int64_t n = 0;
  for (const auto& [address, range] : g_ranges) {
    if (range.tag != tag) continue;
    if (n < capacity) {
      addresses[n] = address;
      sizes[n] = range.size;
      mapped[n] = range.handle != nullptr ? 1 : 0;
    }
    ++n;
  }
  return n;
}

int vmm_pool_unmap(uint64_t address) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_ranges.find(address);
  if (it == g_ranges.end()) return -1;
  return unmap_range(it->first, it->second);
}

int vmm_pool_map(uint64_t address) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_ranges.find(address);
  if (it == g_ranges.end()) return -1;
  if (it->second.handle != nullptr) return ACL_SUCCESS;
  return map_range(it->first, it->second);
}

// Synchronous copies between a mapped range and host memory, and zeroing a mapped range.
int vmm_pool_to_host(uint64_t host, uint64_t device_address, uint64_t bytes) {
  return aclrtMemcpy(reinterpret_cast<void*>(host), bytes,
                     reinterpret_cast<const void*>(device_address), bytes,
                     ACL_MEMCPY_DEVICE_TO_HOST);
}

int vmm_pool_from_host(uint64_t device_address, uint64_t host, uint64_t bytes) {
  return aclrtMemcpy(reinterpret_cast<void*>(device_address), bytes,
                     reinterpret_cast<const void*>(host), bytes, ACL_MEMCPY_HOST_TO_DEVICE);
}

int vmm_pool_zero(uint64_t device_address, uint64_t bytes) {
  return aclrtMemset(reinterpret_cast<void*>(device_address), bytes, 0, bytes);
}

int vmm_pool_last_error() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_last_error;
}

}  // extern "C"

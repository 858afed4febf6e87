// The part of CANN's acl/acl.h that src/adapters/npu/native/vmm_pool.cpp uses, declared
// with CANN's names and signatures for the emulated NPU (test support, not product): the
// functions are defined in ../../device.cpp over host memory, compiled into one extension
// with vmm_pool.cpp. Enum values here are the emulator's own, not CANN's.
#ifndef EMULATED_NPU_ACL_ACL_H_
#define EMULATED_NPU_ACL_ACL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef void* aclrtStream;
typedef void* aclrtContext;
typedef void* aclrtDrvMemHandle;

#define ACL_SUCCESS 0
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001

typedef enum aclrtMemcpyKind {
  ACL_MEMCPY_HOST_TO_HOST,
  ACL_MEMCPY_HOST_TO_DEVICE,
  ACL_MEMCPY_DEVICE_TO_HOST,
  ACL_MEMCPY_DEVICE_TO_DEVICE,
} aclrtMemcpyKind;

typedef enum aclrtMemAttr {
  ACL_DDR_MEM,
  ACL_HBM_MEM_HUGE,
  ACL_HBM_MEM_NORMAL,
} aclrtMemAttr;

typedef enum aclrtMemHandleType { ACL_MEM_HANDLE_TYPE_NONE = 0 } aclrtMemHandleType;
typedef enum aclrtMemAllocationType { ACL_MEM_ALLOCATION_TYPE_PINNED = 0 } aclrtMemAllocationType;
typedef enum aclrtMemLocationType {
  ACL_MEM_LOCATION_TYPE_HOST = 0,
  ACL_MEM_LOCATION_TYPE_DEVICE,
} aclrtMemLocationType;

typedef struct aclrtMemLocation {
  uint32_t id;
  aclrtMemLocationType type;
} aclrtMemLocation;

typedef struct aclrtPhysicalMemProp {
  aclrtMemHandleType handleType;
  aclrtMemAllocationType allocationType;
  aclrtMemAttr memAttr;
  aclrtMemLocation location;
  uint64_t reserve;
} aclrtPhysicalMemProp;

typedef enum aclrtMemGranularityOptions {
  ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
  ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
} aclrtMemGranularityOptions;

aclError aclrtGetCurrentContext(aclrtContext* context);
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp* prop,
                                          aclrtMemGranularityOptions option, size_t* granularity);
aclError aclrtReserveMemAddress(void** virPtr, size_t size, size_t alignment, void* expectPtr,
                                uint64_t flags);
aclError aclrtReleaseMemAddress(void* virPtr);
aclError aclrtMallocPhysical(aclrtDrvMemHandle* handle, size_t size,
                             const aclrtPhysicalMemProp* prop, uint64_t flags);
aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
aclError aclrtMapMem(void* virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                     uint64_t flags);
aclError aclrtUnmapMem(void* virPtr);
aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                     aclrtMemcpyKind kind);
aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count);

#ifdef __cplusplus
}
#endif

#endif  // EMULATED_NPU_ACL_ACL_H_

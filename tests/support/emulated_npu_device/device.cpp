// An emulated NPU for tests: torch's PrivateUse1 backend (renamed "npu" in Python) whose
// memory is host memory. Test support, not product; written for torch 2.13 (CPU build).
//
// Strict where a device is strict: an op mixing devices fails (0-dim CPU scalars aside),
// as on an NPU. Counting what costs time on a device: device-to-host copies, scalar reads
// and host-to-device copies, and every op run through the fallback. Allocated and peak
// bytes are tracked per device against a configurable capacity (backs mem_get_info).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/Exceptions.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kMaxDevices = 8;
constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

// ---- configuration and counters --------------------------------------------------------

std::atomic<int> g_device_count{2};
std::atomic<int64_t> g_capacity{int64_t(64) << 30};

struct Counters {
  std::atomic<int64_t> d2h_copies{0};
  std::atomic<int64_t> d2h_bytes{0};
  std::atomic<int64_t> h2d_copies{0};
  std::atomic<int64_t> h2d_bytes{0};
  std::atomic<int64_t> d2d_copies{0};
  std::atomic<int64_t> scalar_reads{0};
  std::atomic<int64_t> fallback_ops{0};
  std::atomic<int64_t> dynamic_shape_ops{0};  // e.g. nonzero: the host waits for the size
};
Counters g_counters;
std::mutex g_op_mutex;
std::map<std::string, int64_t> g_op_counts;

thread_local int t_current_device = 0;
// Inside one emulated fused kernel (a torch_npu op computed with aten ops): nothing counts,
// as a real kernel launches once and reads nothing back.
thread_local bool t_uncounted = false;

void count_op(const std::string& name) {
  g_counters.fallback_ops.fetch_add(1);
  std::lock_guard<std::mutex> lock(g_op_mutex);
  g_op_counts[name]++;
}
thread_local int64_t t_current_stream[kMaxDevices] = {0};
std::atomic<int64_t> g_next_stream{1};

// ---- the allocator ---------------------------------------------------------------------

struct DeviceMemory {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
};
DeviceMemory g_memory[kMaxDevices];

struct Block {
  int device;
  size_t bytes;
  void* data;
};

void free_block(void* ctx);

class NpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    int device = t_current_device;
    auto& mem = g_memory[device];
    int64_t now = mem.allocated.load() + static_cast<int64_t>(nbytes);
    if (now > g_capacity.load()) {
      TORCH_CHECK_WITH(
          OutOfMemoryError, false, "emulated NPU out of memory: tried to allocate ", nbytes,
          " bytes on npu:", device, " with ", mem.allocated.load(), " of ", g_capacity.load(),
          " bytes allocated");
    }
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    auto* block = new Block{device, nbytes, data};
    now = mem.allocated.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = mem.peak.load();
    while (now > peak && !mem.peak.compare_exchange_weak(peak, now)) {
    }
    mem.allocations.fetch_add(1);
    return {data, block, &free_block, c10::Device(kNpu, static_cast<c10::DeviceIndex>(device))};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto& mem = g_memory[device];
    for (auto& stat : {&stats.allocated_bytes[0], &stats.reserved_bytes[0], &stats.active_bytes[0],
                       &stats.requested_bytes[0]}) {
      stat->current = mem.allocated.load();
      stat->peak = mem.peak.load();
    }
    stats.allocation[0].current = mem.allocations.load();
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex device) override {
    g_memory[device].peak.store(g_memory[device].allocated.load());
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int64_t used = g_memory[device].allocated.load();
    int64_t cap = g_capacity.load();
    return {static_cast<size_t>(std::max<int64_t>(cap - used, 0)), static_cast<size_t>(cap)};
  }
};

void free_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  if (block->data) c10::free_cpu(block->data);
  g_memory[block->device].allocated.fetch_sub(static_cast<int64_t>(block->bytes));
  g_memory[block->device].allocations.fetch_sub(1);
  delete block;
}

NpuAllocator g_allocator;

// Host memory "pinned" for the device: plain host memory, remembered so is_pinned works.
std::mutex g_pinned_mutex;
std::set<const void*> g_pinned;

void free_pinned(void* data) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(data);
  }
  c10::free_cpu(data);
}

class PinnedAllocator final : public at::HostAllocator {
 public:
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(data);
    }
    return {data, data, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
PinnedAllocator g_pinned_allocator;

}  // namespace

namespace {

// ---- device guard, streams, events -----------------------------------------------------

struct EventRecord {
  double millis;
};

double now_millis() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < g_device_count.load(), "Invalid device id ", int(index),
              ": the emulated NPU has ", g_device_count.load(), " device(s)");
}

struct NpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kNpu, static_cast<c10::DeviceIndex>(t_current_device));
  }
  void setDevice(c10::Device d) const override {
    check_index(d.index());
    t_current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { t_current_device = d.index(); }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, t_current_stream[d.index()]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, 0);
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    if (!d.has_index()) d = c10::Device(kNpu, static_cast<c10::DeviceIndex>(t_current_device));
    return c10::Stream(c10::Stream::UNSAFE, d, g_next_stream.fetch_add(1));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return getNewStream(d, 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto old = getStream(s.device());
    t_current_stream[s.device_index()] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<EventRecord*>(event);
  }
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = new EventRecord{0.0};
    static_cast<EventRecord*>(*event)->millis = now_millis();
  }
  // Work runs when it is issued, so every wait is already satisfied.
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  double elapsedTime(void* a, void* b, const c10::DeviceIndex) const override {
    TORCH_CHECK(a && b, "elapsedTime: both events must have been recorded");
    return static_cast<EventRecord*>(b)->millis - static_cast<EventRecord*>(a)->millis;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NpuGuardImpl);

struct NpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    check_index(d);
    t_current_device = d;
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(t_current_device);
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = getCurrentDevice();
    setCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_pinned.count(data) > 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  at::Device getDeviceFromPtr(void*) const override {
    return at::Device(kNpu, static_cast<c10::DeviceIndex>(t_current_device));
  }
  // Random ops run on CPU kernels (the fallback), so generators are CPU generators: a
  // generator made for `npu` reports device cpu (the one place the emulation shows).
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

// ---- host views of device memory -------------------------------------------------------

void noop_delete(void*) {}

// A CPU tensor over the same memory as the device tensor `t` (no copy). An out= kernel
// may resize it: its storage then moves to fresh host memory, and the fallback moves the
// result back into device memory (see write_back).
at::Tensor host_alias(const at::Tensor& t) {
  const auto& storage = t.storage();
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                           c10::DataPtr(storage.mutable_data(), storage.mutable_data(),
                                        &noop_delete, c10::Device(c10::DeviceType::CPU)),
                           c10::GetCPUAllocator(), /*resizable=*/true);
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(cpu_storage), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

// A device tensor sharing `storage` with the given geometry.
at::Tensor device_view(const c10::Storage& storage, caffe2::TypeMeta dtype, at::IntArrayRef sizes,
                       at::IntArrayRef strides, int64_t offset) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
  out.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return out;
}

at::Tensor host_view(const at::Tensor& t) { return t.is_cpu() ? t : host_alias(t); }

// ---- kernels ---------------------------------------------------------------------------

at::Tensor npu_empty(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                     std::optional<at::Layout>, std::optional<at::Device> device,
                     std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(device.value_or(c10::Device(kNpu, t_current_device)));
  return at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor npu_empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                             std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                             std::optional<at::Device> device, std::optional<bool>) {
  c10::DeviceGuard guard(device.value_or(c10::Device(kNpu, t_current_device)));
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor npu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  const bool src_dev = self.device().type() == kNpu;
  const bool dst_dev = dst.device().type() == kNpu;
  const int64_t bytes = self.numel() * static_cast<int64_t>(self.element_size());
  if (t_uncounted) {
  } else if (src_dev && !dst_dev) {
    g_counters.d2h_copies.fetch_add(1);
    g_counters.d2h_bytes.fetch_add(bytes);
  } else if (!src_dev && dst_dev) {
    g_counters.h2d_copies.fetch_add(1);
    g_counters.h2d_bytes.fetch_add(bytes);
  } else {
    g_counters.d2d_copies.fetch_add(1);
  }
  // Both sides are host memory: the CPU copy kernel converts dtypes and strides.
  host_view(dst).copy_(host_view(self));
  return dst;
}

void resize_storage(const c10::Storage& storage, size_t nbytes) {
  if (nbytes <= storage.nbytes()) return;
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  c10::DeviceGuard guard(storage.device());
  auto fresh = g_allocator.allocate(nbytes);
  if (storage.nbytes() > 0) std::memcpy(fresh.get(), storage.data(), storage.nbytes());
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

void NpuHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage(storage, newsize);
}

const at::Tensor& npu_resize_(const at::Tensor& self, at::IntArrayRef size,
                              std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const auto numel = impl->numel();
  const size_t needed =
      static_cast<size_t>(numel + impl->storage_offset()) * self.dtype().itemsize();
  if (numel > 0) resize_storage(impl->storage(), needed);
  if (memory_format.has_value() && *memory_format != at::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor npu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) npu_resize_(dst, self.sizes(), std::nullopt);
  return npu_copy_from(self, dst, false);
}

at::Scalar npu_local_scalar_dense(const at::Tensor& self) {
  if (!t_uncounted) g_counters.scalar_reads.fetch_add(1);
  return at::_local_scalar_dense(host_alias(self));
}

at::Tensor& npu_set_source_storage(at::Tensor& self, at::Storage source, int64_t offset,
                                   at::IntArrayRef size, at::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kNpu, "set_: the storage is on ", source.device(),
              ", the tensor on ", self.device());
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(size, stride, offset);
  return self;
}

at::Tensor& npu_set_storage(at::Tensor& self, at::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return npu_set_source_storage(self, std::move(source), 0, {numel}, {1});
}

at::Tensor& npu_set_tensor(at::Tensor& self, const at::Tensor& source) {
  return npu_set_source_storage(self, source.storage(), source.storage_offset(), source.sizes(),
                                source.strides());
}

at::Tensor& npu_set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, true);
  return npu_set_source_storage(self, storage, 0, {0}, {});
}

// ---- the fallback: every other op on CPU kernels over host views -------------------------

struct Replaced {
  at::Tensor device;  // the device tensor the host view stands for
  at::Tensor host;
  const void* data;
  bool written;  // an argument the op writes (in-place or out=)
};

// An out= argument the CPU kernel resized: give the device tensor the new geometry, and
// the new contents when the kernel had to move the storage.
void write_back(const Replaced& r) {
  if (!r.written) return;
  auto* dev = r.device.unsafeGetTensorImpl();
  const auto& host = r.host;
  if (host.storage().data() != r.data) {
    const auto& storage = dev->storage();
    resize_storage(storage, host.storage().nbytes());
    std::memcpy(storage.mutable_data(), host.storage().data(), host.storage().nbytes());
  }
  if (host.sizes() != r.device.sizes() || host.strides() != r.device.strides() ||
      host.storage_offset() != r.device.storage_offset()) {
    dev->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
  }
}

std::string device_str(const at::Device& d) { return d.str(); }

void check_same_device(const c10::OperatorHandle& op, const std::vector<at::Tensor>& tensors,
                       std::optional<at::Device>& where) {
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    if (t.is_cpu() && t.dim() == 0) continue;  // CPU scalars mix with any device
    if (!where.has_value()) {
      where = t.device();
    } else if (*where != t.device()) {
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                  "devices, ", device_str(*where), " and ", device_str(t.device()),
                  "! (emulated NPU, in ", op.schema().operator_name().name, ")");
    }
  }
}

at::Tensor to_device_output(const at::Tensor& out, const std::vector<Replaced>& replaced,
                            const at::Device& device) {
  if (!out.defined() || !out.is_cpu()) return out;
  for (const auto& r : replaced) {
    if (out.is_same(r.host)) return r.device;
    if (out.has_storage() && out.storage().data() == r.data) {
      // A view of a device tensor's memory: the same view on the device.
      return device_view(r.device.storage(), out.dtype(), out.sizes(), out.strides(),
                         out.storage_offset());
    }
  }
  c10::DeviceGuard guard(device);
  at::Tensor fresh;
  if (out.is_non_overlapping_and_dense()) {
    fresh = npu_empty_strided(out.sizes(), out.strides(), out.scalar_type(), std::nullopt, device,
                              std::nullopt);
  } else {
    fresh = npu_empty(out.sizes(), out.scalar_type(), std::nullopt, device, std::nullopt,
                      std::nullopt);
  }
  host_alias(fresh).copy_(out);
  return fresh;
}

// Whether the op's output size depends on device data, so a device must report it to the
// host before the op returns (nonzero, a boolean-mask index). The tag over-approximates:
// repeat_interleave with output_size given, and integer indexing, need no wait.
bool waits_for_host(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t start) {
  if (!op.hasTag(at::Tag::dynamic_output_shape)) return false;
  const auto& name = op.schema().operator_name().name;
  const auto& args = op.schema().arguments();
  if (name == "aten::repeat_interleave") {
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].name() == "output_size") return stack[start + i].isNone();
    }
  }
  if (name == "aten::index") {
    for (size_t i = start; i < stack.size(); ++i) {
      if (!stack[i].isList()) continue;
      for (const auto& e : stack[i].toListRef()) {
        if (e.isTensor()) {
          const auto kind = e.toTensor().scalar_type();
          if (kind == at::kBool || kind == at::kByte) return true;
        }
      }
    }
    return false;
  }
  return true;
}

void npu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto num_args = schema.arguments().size();
  const auto start = stack->size() - num_args;
  if (!t_uncounted) {
    count_op(schema.operator_name().name +
             (schema.overload_name().empty() ? "" : "." + schema.overload_name()));
    if (waits_for_host(op, *stack, start)) g_counters.dynamic_shape_ops.fetch_add(1);
  }

  std::vector<at::Tensor> tensors;
  std::optional<at::Device> where;
  for (size_t i = start; i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorList()) tensors.push_back(t);
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) tensors.push_back(e.toTensor());
      }
    } else if (v.isDevice() && v.toDevice().type() == kNpu) {
      auto d = v.toDevice();
      if (!d.has_index()) d = c10::Device(kNpu, t_current_device);
      if (!where.has_value()) where = d;
    }
  }
  check_same_device(op, tensors, where);
  const at::Device device = where.value_or(c10::Device(kNpu, t_current_device));
  if (device.type() != kNpu) {
    // Only CPU tensors (and no device argument) reached this key: nothing to emulate.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  c10::DeviceGuard guard(device);

  std::vector<Replaced> replaced;
  bool written = false;
  auto replace = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() != kNpu) return t;
    auto host = host_alias(t);
    replaced.push_back({t, host, t.storage().data(), written});
    return host;
  };
  for (size_t i = start; i < stack->size(); ++i) {
    const auto* alias = schema.arguments()[i - start].alias_info();
    written = alias != nullptr && alias->isWrite();
    auto& v = (*stack)[i];
    if (v.isTensor()) {
      v = replace(v.toTensor());
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      c10::List<at::Tensor> fresh;
      for (const auto& t : list) fresh.push_back(replace(t));
      v = fresh;
    } else if (v.isList()) {
      const auto& list = v.toListRef();
      bool has_tensor = false;
      for (const auto& e : list) has_tensor |= e.isTensor();
      if (has_tensor) {
        c10::List<std::optional<at::Tensor>> fresh;
        for (const auto& e : list) {
          if (e.isTensor()) {
            fresh.push_back(replace(e.toTensor()));
          } else {
            fresh.push_back(std::nullopt);
          }
        }
        v = fresh;
      }
    } else if (v.isDevice() && v.toDevice().type() == kNpu) {
      v = c10::IValue(c10::Device(c10::DeviceType::CPU));
    }
  }

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (const auto& r : replaced) write_back(r);

  // Outputs: host views of device memory go back as the device tensors; new host
  // tensors are copied into device memory.
  const auto num_returns = schema.returns().size();
  const auto out_start = stack->size() - num_returns;
  for (size_t i = out_start; i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    if (v.isTensor()) {
      v = to_device_output(v.toTensor(), replaced, device);
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> fresh;
      for (const auto& t : v.toTensorList()) fresh.push_back(to_device_output(t, replaced, device));
      v = fresh;
    }
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(npu_empty));
  m.impl("empty_strided", TORCH_FN(npu_empty_strided));
  m.impl("_copy_from", TORCH_FN(npu_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(npu_copy_from_and_resize));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("resize_", TORCH_FN(npu_resize_));
  m.impl("_local_scalar_dense", TORCH_FN(npu_local_scalar_dense));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(npu_set_source_storage));
  m.impl("set_.source_Storage", TORCH_FN(npu_set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(npu_set_tensor));
  m.impl("set_", TORCH_FN(npu_set_empty));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&npu_fallback>());
}

namespace {

bool g_registered = false;

void setup(int device_count, int64_t capacity) {
  TORCH_CHECK(device_count >= 1 && device_count <= kMaxDevices, "device_count must be in [1, ",
              kMaxDevices, "]");
  g_device_count.store(device_count);
  g_capacity.store(capacity);
  if (!g_registered) {
    c10::SetAllocator(kNpu, &g_allocator);
    at::setHostAllocator(kNpu, &g_pinned_allocator);
    static NpuHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
    g_registered = true;
  }
}

std::map<std::string, int64_t> counters() {
  std::map<std::string, int64_t> out{
      {"d2h_copies", g_counters.d2h_copies.load()},
      {"d2h_bytes", g_counters.d2h_bytes.load()},
      {"h2d_copies", g_counters.h2d_copies.load()},
      {"h2d_bytes", g_counters.h2d_bytes.load()},
      {"d2d_copies", g_counters.d2d_copies.load()},
      {"scalar_reads", g_counters.scalar_reads.load()},
      {"fallback_ops", g_counters.fallback_ops.load()},
      {"dynamic_shape_ops", g_counters.dynamic_shape_ops.load()},
  };
  return out;
}

std::map<std::string, int64_t> op_counts() {
  std::lock_guard<std::mutex> lock(g_op_mutex);
  return g_op_counts;
}

void reset_counters() {
  g_counters.d2h_copies = 0;
  g_counters.d2h_bytes = 0;
  g_counters.h2d_copies = 0;
  g_counters.h2d_bytes = 0;
  g_counters.d2d_copies = 0;
  g_counters.scalar_reads = 0;
  g_counters.fallback_ops = 0;
  g_counters.dynamic_shape_ops = 0;
  std::lock_guard<std::mutex> lock(g_op_mutex);
  g_op_counts.clear();
}

std::map<std::string, int64_t> memory(int device) {
  check_index(static_cast<c10::DeviceIndex>(device));
  return {{"allocated", g_memory[device].allocated.load()},
          {"peak", g_memory[device].peak.load()},
          {"allocations", g_memory[device].allocations.load()},
          {"capacity", g_capacity.load()}};
}

void reset_peak(int device) {
  check_index(static_cast<c10::DeviceIndex>(device));
  g_memory[device].peak.store(g_memory[device].allocated.load());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("setup", &setup, "Register the allocator and hooks; set device count and capacity");
  m.def("counters", &counters);
  m.def("op_counts", &op_counts);
  m.def("reset_counters", &reset_counters);
  m.def("memory", &memory);
  m.def("reset_peak", &reset_peak);
  m.def("set_capacity", [](int64_t c) { g_capacity.store(c); });
  m.def("current_device", []() { return t_current_device; });
  m.def("set_device", [](int d) {
    check_index(static_cast<c10::DeviceIndex>(d));
    t_current_device = d;
  });
  m.def("device_count", []() { return g_device_count.load(); });
  m.def("set_uncounted", [](bool on) {
    bool old = t_uncounted;
    t_uncounted = on;
    return old;
  });
  m.def("count_op", &count_op);
}

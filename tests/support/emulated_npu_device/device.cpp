// An emulated NPU for tests: torch's PrivateUse1 backend (renamed "npu" in Python) whose
// memory is host memory. Test support, not product; written for torch 2.13 (CPU build).
//
// Strict where a device is strict: an op mixing devices fails (0-dim CPU scalars aside),
// as on an NPU. Counting what costs time on a device: device-to-host copies, scalar reads
// and host-to-device copies, and every op run through the fallback. Allocated and peak
// bytes are tracked per device against a configurable capacity (backs mem_get_info).
//
// Graphs (torch_npu's NPUGraph, see tests/support/torch_npu_emulator/graphs.py): a capture
// records what is launched on the capturing stream (and the streams forked from it) and
// refuses what a real capture refuses (reads to the host, ops that wait for an output size,
// synchronisations, side streams not joined back); memory taken during a capture comes from
// the graph's pool, which keeps its blocks until the last graph using it is reset. A replay
// runs the record again over the same memory and allocates no device memory.

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

#include <acl/acl.h>  // the emulated ACL's declarations (include/acl/acl.h)
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
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
  std::atomic<int64_t> graph_captures{0};     // captures ended successfully
  std::atomic<int64_t> graph_replays{0};      // NPUGraph.replay() calls
  std::atomic<int64_t> graph_replayed_ops{0}; // recorded ops run by replays (not launches)
};
Counters g_counters;
std::mutex g_op_mutex;
std::map<std::string, int64_t> g_op_counts;

thread_local int t_current_device = 0;
// Inside one emulated fused kernel (a torch_npu op computed with aten ops): nothing counts,
// as a real kernel launches once and reads nothing back.
thread_local bool t_uncounted = false;
// Inside a replay: device memory an op takes is the kernel's own scratch (a real replay
// runs on memory the capture reserved), so it is host memory outside the device's books.
thread_local bool t_scratch = false;

// When set (set_launch_hook), told the name of each counted launch and copy, with the GIL
// held: a benchmark's way to say where in the Python code each one comes from.
std::atomic<bool> g_has_launch_hook{false};
py::object* g_launch_hook = nullptr;

void tell_launch_hook(const std::string& what) {
  if (!g_has_launch_hook.load()) return;
  py::gil_scoped_acquire gil;
  if (g_launch_hook != nullptr && !g_launch_hook->is_none()) (*g_launch_hook)(what);
}

void count_op(const std::string& name) {
  g_counters.fallback_ops.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(g_op_mutex);
    g_op_counts[name]++;
  }
  tell_launch_hook(name);
}
thread_local int64_t t_current_stream[kMaxDevices] = {0};
std::atomic<int64_t> g_next_stream{1};

// ---- the allocator ---------------------------------------------------------------------

struct DeviceMemory {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> graph_pools{0};  // bytes held by graph pools (part of `allocated`)
};
DeviceMemory g_memory[kMaxDevices];

struct Block {
  int device;
  size_t bytes;
  void* data;
  int64_t pool = 0;      // the graph pool that owns it (0: none)
  bool scratch = false;  // a replay's scratch: not device memory on the books
  void (*pool_free)(void*, size_t, int, void*) = nullptr;  // a MemPool's allocator's free
};

// torch_npu's MemPool over a pluggable allocator (NPUPluggableAllocator): while a thread
// allocates to such a pool (use_mem_pool), its device memory comes from the allocator's
// functions and goes back through them. What they hand out is on the books of whatever
// they take it from (the emulated ACL below: aclrtMallocPhysical), not of this allocator.
struct MemPoolFns {
  void* (*alloc)(size_t, int, void*) = nullptr;
  void (*free)(void*, size_t, int, void*) = nullptr;
};
std::mutex g_mem_pool_mutex;
std::map<int64_t, MemPoolFns> g_mem_pools;
std::atomic<int64_t> g_next_mem_pool{1};
thread_local int64_t t_mem_pool[kMaxDevices] = {0};

void free_block(void* ctx);

// ---- graph pools and captures (state; the logic is further down) ------------------------

struct Pool {
  int device = 0;
  int64_t graphs = 0;                    // graphs capturing into it or holding a capture
  int64_t reserved = 0;                  // bytes of its blocks
  std::multimap<size_t, Block*> free;    // blocks no tensor holds, kept for later captures
  std::set<Block*> blocks;               // every block it owns
};

struct SideStream {
  int64_t last = 0;    // sequence number of its last recorded op
  int64_t joined = 0;  // sequence number the capturing stream last waited for
  std::string last_op;
};

struct Node {
  int kind = 0;  // 0: an aten op, 1: a copy, 2: a Python node (torch_npu op, external event)
  std::optional<c10::OperatorHandle> op;
  std::vector<c10::IValue> args;  // device tensors as aliases of the captured memory
  std::vector<c10::IValue> outs;  // per return: the captured output when it was fresh memory
  at::Tensor src, dst;
  int64_t py_index = -1;
};

struct Graph {
  int64_t id = 0;
  int device = 0;
  int64_t stream = 0;
  int64_t pool = 0;
  std::string mode;
  std::thread::id thread;
  bool capturing = false;
  bool captured = false;
  std::vector<Node> nodes;
  std::map<int64_t, SideStream> side;
  int64_t seq = 0;
  std::string invalid;  // the first refusal during the capture
  // Memory outside the graph's pool that the record addresses (weights, caches, inputs),
  // with its address at capture: a replay refuses once any of it moved (see replay_check).
  mutable std::vector<std::pair<c10::Storage, const void*>> addressed;
};

std::recursive_mutex g_graph_mutex;
std::map<int64_t, Pool> g_pools;
std::map<int64_t, std::shared_ptr<Graph>> g_graphs;
std::map<std::pair<int, int64_t>, int64_t> g_capturing;     // (device, stream) -> graph
std::map<std::pair<int, int64_t>, std::string> g_blocked;   // stream -> why it cannot run
std::atomic<int> g_captures_underway{0};
std::atomic<int> g_blocked_streams{0};
std::atomic<int64_t> g_next_graph{1};
std::atomic<int64_t> g_next_pool{1};

std::shared_ptr<Graph> graph_on(int device, int64_t stream) {
  if (g_captures_underway.load() == 0) return nullptr;
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  auto it = g_capturing.find({device, stream});
  if (it == g_capturing.end()) return nullptr;
  auto g = g_graphs.find(it->second);
  return g == g_graphs.end() ? nullptr : g->second;
}

std::shared_ptr<Graph> graph_on_current(int device) {
  return graph_on(device, t_current_stream[device]);
}

size_t pool_round(size_t n) { return (n + 511) / 512 * 512; }

class NpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    int device = t_current_device;
    auto& mem = g_memory[device];
    const auto where = c10::Device(kNpu, static_cast<c10::DeviceIndex>(device));
    if (t_scratch) {
      void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
      auto* block = new Block{device, nbytes, data, 0, true};
      return {data, block, &free_block, where};
    }
    if (t_mem_pool[device] != 0 && nbytes > 0 && !graph_on_current(device)) {
      MemPoolFns fns;
      {
        std::lock_guard<std::mutex> lock(g_mem_pool_mutex);
        fns = g_mem_pools.at(t_mem_pool[device]);
      }
      void* data = fns.alloc(nbytes, device, nullptr);
      TORCH_CHECK_WITH(OutOfMemoryError, data != nullptr, "emulated NPU: the MemPool's "
                       "pluggable allocator gave no memory for ", nbytes, " bytes on npu:",
                       device, " with ", mem.allocated.load(), " of ", g_capacity.load(),
                       " bytes allocated");
      auto* block = new Block{device, nbytes, data, 0, false, fns.free};
      return {data, block, &free_block, where};
    }
    int64_t pool = 0;
    if (nbytes > 0) {
      if (auto g = graph_on_current(device)) pool = g->pool;
    }
    if (pool != 0) {
      // A capture takes its memory from the graph's pool: a block freed earlier in this
      // capture, or by a graph that shares the pool, is reused; otherwise a new one.
      nbytes = pool_round(nbytes);
      std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
      auto& p = g_pools[pool];
      auto it = p.free.lower_bound(nbytes);
      if (it != p.free.end() && it->first <= 2 * nbytes) {
        Block* block = it->second;
        p.free.erase(it);
        return {block->data, block, &free_block, where};
      }
    }
    int64_t now = mem.allocated.load() + static_cast<int64_t>(nbytes);
    if (now > g_capacity.load()) {
      TORCH_CHECK_WITH(
          OutOfMemoryError, false, "emulated NPU out of memory: tried to allocate ", nbytes,
          " bytes on npu:", device, " with ", mem.allocated.load(), " of ", g_capacity.load(),
          " bytes allocated");
    }
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    auto* block = new Block{device, nbytes, data, pool, false};
    now = mem.allocated.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = mem.peak.load();
    while (now > peak && !mem.peak.compare_exchange_weak(peak, now)) {
    }
    mem.allocations.fetch_add(1);
    if (pool != 0) {
      std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
      auto& p = g_pools[pool];
      p.reserved += static_cast<int64_t>(nbytes);
      p.blocks.insert(block);
      mem.graph_pools.fetch_add(static_cast<int64_t>(nbytes));
    }
    return {data, block, &free_block, where};
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

void release_block(Block* block) {
  if (block->data) c10::free_cpu(block->data);
  g_memory[block->device].allocated.fetch_sub(static_cast<int64_t>(block->bytes));
  g_memory[block->device].allocations.fetch_sub(1);
  delete block;
}

void free_block(void* ctx) {
  auto* block = static_cast<Block*>(ctx);
  if (block->pool_free != nullptr) {
    block->pool_free(block->data, block->bytes, block->device, nullptr);
    delete block;
    return;
  }
  if (block->scratch) {
    if (block->data) c10::free_cpu(block->data);
    delete block;
    return;
  }
  if (block->pool != 0) {
    std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
    auto it = g_pools.find(block->pool);
    if (it != g_pools.end()) {  // back to its pool: graphs may still address it
      it->second.free.emplace(block->bytes, block);
      return;
    }
  }
  if (block->data) c10::free_cpu(block->data);
  g_memory[block->device].allocated.fetch_sub(static_cast<int64_t>(block->bytes));
  g_memory[block->device].allocations.fetch_sub(1);
  delete block;
}

NpuAllocator g_allocator;

// Host memory "pinned" for the device: plain host memory, remembered (with its size) so
// is_pinned works and an in-flight copy can name the buffer it reads.
std::mutex g_pinned_mutex;
std::map<const void*, size_t> g_pinned;

// ---- non_blocking copies from pinned memory, in flight until the host orders them -------
// On an NPU (as on a GPU) a non_blocking host-to-device copy from pinned memory returns at
// once and its DMA reads the host bytes when the stream reaches it. The host may write that
// memory again only once it knows the copy ran: a synchronisation of the copy's stream, of
// the device, or of an event recorded after the copy on that stream (or on a stream that
// waited for one), a blocking copy or scalar read on that stream. The emulator copies at
// once, so it records each such copy as in flight with the bytes it read and, when a later
// copy reads overlapping pinned memory or an ordering retires it, checks that the host has
// not rewritten them: a rewrite fails loudly where the device would have sent the new
// bytes (docs/emulated-npu.md). Ordering is tracked with a clock per stream: each in-flight
// copy takes a sequence number, a stream's clock is what its next work waits for (its own
// copies, and the clocks of the events it waited for), an event holds its stream's clock.
using StreamKey = std::pair<int, int64_t>;
using Clock = std::map<StreamKey, int64_t>;

struct InFlight {
  const char* src = nullptr;
  size_t bytes = 0;
  const void* base = nullptr;  // the pinned allocation it lies in
  size_t base_bytes = 0;
  StreamKey stream;
  int64_t seq = 0;
  bool replayed = false;  // a graph replay's captured copy
  bool snapshot = false;  // bytes_at_copy holds the bytes read (up to kSnapshotBytes)
  std::vector<unsigned char> bytes_at_copy;
  uint64_t hash = 0;      // else their hash
};
constexpr size_t kSnapshotBytes = 64 << 10;
constexpr size_t kMaxInFlight = 4096;  // past it the oldest is forgotten (never a refusal)

std::mutex g_flight_mutex;
std::vector<InFlight> g_in_flight;
std::map<StreamKey, Clock> g_stream_clock;
int64_t g_flight_seq = 0;

uint64_t hash_bytes(const char* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ w) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ull;
  return h;
}

// The first byte of the copy's source the host changed since the copy (-1: none).
int64_t first_changed(const InFlight& f) {
  if (f.snapshot) {
    for (size_t i = 0; i < f.bytes; ++i) {
      if (static_cast<unsigned char>(f.src[i]) != f.bytes_at_copy[i]) return static_cast<int64_t>(i);
    }
    return -1;
  }
  return hash_bytes(f.src, f.bytes) == f.hash ? -1 : 0;
}

void check_unchanged(const InFlight& f, const std::string& found) {
  const int64_t at = first_changed(f);
  if (at < 0) return;
  const auto offset = static_cast<int64_t>(f.src - static_cast<const char*>(f.base));
  std::ostringstream out;
  out << "emulated NPU: the host wrote pinned host memory while a non_blocking host-to-device "
      << "copy from it was in flight. The pinned buffer at " << f.base << " (" << f.base_bytes
      << " bytes): its bytes [" << offset << ", " << offset + static_cast<int64_t>(f.bytes)
      << ") were sent to npu:" << f.stream.first << " on stream " << f.stream.second
      << (f.replayed ? " by a graph replay's captured copy" : " by copy_(non_blocking=True)");
  if (!f.snapshot) {
    out << " and have changed since";
  } else {
    out << " and byte " << offset + at << " has changed since";
  }
  out << ", found " << found << ", with nothing between ordering that copy on the host. On "
      << "an NPU the copy may run after the write and send the new bytes (or a mix). Before "
      << "the host writes a pinned buffer again, wait for its last copy: record an event on "
      << "the copy's stream after the copy and synchronize() it first (or synchronize the "
      << "stream or the device), or stage each step in a buffer of its own.";
  TORCH_CHECK(false, out.str());
}

// A non_blocking copy of [src, src + bytes) from pinned memory, issued on `stream`:
// overlapping copies still in flight are checked first.
void copy_in_flight(const char* src, size_t bytes, StreamKey stream, bool replayed) {
  if (bytes == 0) return;
  const void* base = nullptr;
  size_t base_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto it = g_pinned.upper_bound(src);
    if (it == g_pinned.begin()) return;
    --it;
    base = it->first;
    base_bytes = it->second;
    if (src >= static_cast<const char*>(base) + base_bytes) return;
  }
  std::lock_guard<std::mutex> lock(g_flight_mutex);
  for (size_t i = 0; i < g_in_flight.size(); ++i) {
    const auto& f = g_in_flight[i];
    if (f.src < src + bytes && src < f.src + f.bytes) {
      try {
        check_unchanged(f, "at a later copy from that memory");
      } catch (...) {
        g_in_flight.erase(g_in_flight.begin() + static_cast<std::ptrdiff_t>(i));
        throw;
      }
    }
  }
  if (g_in_flight.size() >= kMaxInFlight) g_in_flight.erase(g_in_flight.begin());
  InFlight f;
  f.src = src;
  f.bytes = bytes;
  f.base = base;
  f.base_bytes = base_bytes;
  f.stream = stream;
  f.seq = ++g_flight_seq;
  f.replayed = replayed;
  f.snapshot = bytes <= kSnapshotBytes;
  if (f.snapshot) {
    f.bytes_at_copy.assign(src, src + bytes);
  } else {
    f.hash = hash_bytes(src, bytes);
  }
  g_stream_clock[stream][stream] = f.seq;
  g_in_flight.push_back(std::move(f));
}

// The host now knows the work `clock` covers ran: those copies are checked and retired.
void order_locked(const Clock& clock, const std::string& what) {
  if (g_in_flight.empty() || clock.empty()) return;
  std::vector<InFlight> kept;
  std::optional<InFlight> changed;
  for (auto& f : g_in_flight) {
    auto it = clock.find(f.stream);
    if (it == clock.end() || it->second < f.seq) {
      kept.push_back(std::move(f));
    } else if (!changed.has_value() && first_changed(f) >= 0) {
      changed = std::move(f);
    }
  }
  g_in_flight = std::move(kept);
  if (changed.has_value()) check_unchanged(*changed, "at " + what + ", which ordered it");
}

void order_stream(int device, int64_t stream, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_flight_mutex);
  auto it = g_stream_clock.find({device, stream});
  if (it != g_stream_clock.end()) order_locked(it->second, what);
}

void order_device(int device, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_flight_mutex);
  Clock all;
  for (const auto& [key, clock] : g_stream_clock) {
    if (key.first != device) continue;
    for (const auto& [k, seq] : clock) all[k] = std::max(all[k], seq);
  }
  order_locked(all, what);
}

// Pinned memory freed, or written by a device-to-host copy: in-flight copies reading it are
// forgotten (torch's host allocator keeps a block from reuse until its copies ran; a
// device's write into it is ordered after a read on the same stream).
void forget_in_flight(const char* start, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_flight_mutex);
  if (g_in_flight.empty()) return;
  std::vector<InFlight> kept;
  for (auto& f : g_in_flight) {
    if (!(f.src < start + bytes && start < f.src + f.bytes)) kept.push_back(std::move(f));
  }
  g_in_flight = std::move(kept);
}

int64_t in_flight_count() {
  std::lock_guard<std::mutex> lock(g_flight_mutex);
  return static_cast<int64_t>(g_in_flight.size());
}

void free_pinned(void* data) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto it = g_pinned.find(data);
    if (it != g_pinned.end()) {
      bytes = it->second;
      g_pinned.erase(it);
    }
  }
  if (bytes > 0) forget_in_flight(static_cast<const char*>(data), bytes);
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
      g_pinned[data] = nbytes;
    }
    return {data, data, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
PinnedAllocator g_pinned_allocator;

// ---- ACL's virtual memory, emulated ------------------------------------------------------
// aclrtReserveMemAddress reserves host address space with no access (PROT_NONE);
// aclrtMallocPhysical makes a memfd of the size, counted in the device's allocated bytes;
// aclrtMapMem puts its pages at the reserved addresses, aclrtUnmapMem takes them away (the
// addresses stay reserved, the contents go with the physical memory). An op on a tensor in
// a reserved range with nothing mapped fails with the reason (unmapped_reason) where a
// device would fault. Granularity: the host page (an NPU's is 2 MiB).

struct Physical {
  int fd = -1;
  size_t size = 0;
  int device = 0;
  int maps = 0;
};
struct Reserved {
  size_t size = 0;
  Physical* mapped = nullptr;
};
std::mutex g_vmm_mutex;
std::map<uintptr_t, Reserved> g_reserved;
std::atomic<int64_t> g_reserved_count{0};

// Why [data, data + bytes) cannot be used now ("" when it can).
std::string unmapped_reason(const void* data, size_t bytes) {
  if (g_reserved_count.load() == 0 || data == nullptr) return "";
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(g_vmm_mutex);
  auto it = g_reserved.upper_bound(address);
  if (it == g_reserved.begin()) return "";
  --it;
  if (address >= it->first + it->second.size || it->second.mapped != nullptr) return "";
  std::ostringstream out;
  out << "its " << bytes << " bytes at " << data << " lie in addresses reserved by "
      << "aclrtReserveMemAddress (" << it->second.size << " bytes) with no physical memory "
      << "mapped (aclrtUnmapMem unmapped it)";
  return out.str();
}

}  // namespace

namespace {

// ---- device guard, streams, events -----------------------------------------------------

struct EventRecord {
  double millis;
  int64_t graph = 0;   // recorded on a stream of this capture
  int64_t stream = 0;  // ... on this stream
  int64_t seq = 0;     // ... after the capture's op of this sequence number
  Clock clock;         // the in-flight copies it follows (its stream's clock at record)
};

Clock stream_clock(int device, int64_t stream) {
  std::lock_guard<std::mutex> lock(g_flight_mutex);
  auto it = g_stream_clock.find({device, stream});
  return it == g_stream_clock.end() ? Clock() : it->second;
}

void order_clock(const Clock& clock, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_flight_mutex);
  order_locked(clock, what);
}

// Refusals during a capture. `where` names the op and what it does; the capture(s) it
// breaks are marked so that capture_end fails too, as a real capture is invalidated.
[[noreturn]] void refuse(int device, const std::string& what, const std::string& fix);

// Whether work launched now on the current stream would be refused by a capture: on the
// capturing stream always; elsewhere under a "global" capture, or a "thread_local" one of
// this thread ("relaxed" lets other streams run).
std::vector<std::shared_ptr<Graph>> captures_refusing(int device) {
  std::vector<std::shared_ptr<Graph>> out;
  if (g_captures_underway.load() == 0) return out;
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  auto here = g_capturing.find({device, t_current_stream[device]});
  if (here != g_capturing.end()) {
    out.push_back(g_graphs[here->second]);
    return out;
  }
  for (const auto& [id, g] : g_graphs) {
    if (!g->capturing) continue;
    if (g->mode == "global" || (g->mode == "thread_local" && g->thread == std::this_thread::get_id()))
      out.push_back(g);
  }
  return out;
}

void refuse(int device, const std::string& what, const std::string& fix) {
  auto graphs = captures_refusing(device);
  std::string msg = "emulated NPU graph capture: " + what + " on npu:" + std::to_string(device) +
                    " stream " + std::to_string(t_current_stream[device]) +
                    " while an NPU graph is being captured";
  if (!graphs.empty()) {
    msg += " (capturing stream " + std::to_string(graphs[0]->stream) +
           ", capture_error_mode=" + graphs[0]->mode + ")";
  }
  msg += "; a real capture refuses it. " + fix;
  {
    std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
    for (auto& g : graphs) {
      if (g->invalid.empty()) g->invalid = msg;
    }
  }
  TORCH_CHECK(false, msg);
}

constexpr const char* kReadFix =
    "Keep the value on the device (index with tensors, torch.where), or read it before "
    "the captured region.";

// A stream whose work cannot start: a replay waiting for an ExternalEvent, or an eager
// wait on one. The emulator runs work when it is issued, so later work there is refused.
void check_not_blocked(int device, int64_t stream, const std::string& what) {
  if (g_blocked_streams.load() == 0) return;
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  auto it = g_blocked.find({device, stream});
  if (it == g_blocked.end()) return;
  TORCH_CHECK(false, "emulated NPU: ", what, " issued on npu:", device, " stream ", stream,
              ", which waits for ", it->second,
              ". On an NPU it would queue behind that wait (or hang, for a synchronisation); "
              "the emulator runs work when issued: record the event (after "
              "graph_task_update_end) before issuing more work on this stream.");
}

bool any_blocked(int device) {
  if (g_blocked_streams.load() == 0) return false;
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  for (const auto& [key, why] : g_blocked) {
    if (key.first == device) return true;
  }
  return false;
}

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
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = new EventRecord{0.0};
    auto* ev = static_cast<EventRecord*>(*event);
    ev->millis = now_millis();
    ev->graph = 0;
    ev->clock = stream_clock(stream.device_index(), stream.id());
    if (auto g = graph_on(stream.device_index(), stream.id())) {
      // Recorded inside a capture: a stream that waits for it joins the capture.
      std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
      ev->graph = g->id;
      ev->stream = stream.id();
      ev->seq = g->seq;
    }
  }
  // Work runs when it is issued, so every wait is already satisfied; inside a capture a
  // wait forks the waiting stream into the capture, or joins a side stream back.
  void block(void* event, const c10::Stream& stream) const override {
    auto* ev = static_cast<EventRecord*>(event);
    if (ev != nullptr && !ev->clock.empty()) {  // the stream's later work follows the event's
      std::lock_guard<std::mutex> lock(g_flight_mutex);
      auto& clock = g_stream_clock[{stream.device_index(), stream.id()}];
      for (const auto& [key, seq] : ev->clock) clock[key] = std::max(clock[key], seq);
    }
    if (ev == nullptr || ev->graph == 0) return;
    std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
    auto found = g_graphs.find(ev->graph);
    if (found == g_graphs.end() || !found->second->capturing) return;
    auto& g = *found->second;
    const int device = stream.device_index();
    const auto key = std::make_pair(device, stream.id());
    auto on = g_capturing.find(key);
    if (on == g_capturing.end()) {
      g_capturing[key] = g.id;
      g.side[stream.id()];
    } else if (on->second == g.id && stream.id() == g.stream && ev->stream != g.stream) {
      auto& side = g.side[ev->stream];
      side.joined = std::max(side.joined, ev->seq);
    }
  }
  // Work runs when issued, so a query finds it done: the host then knows it ran.
  bool queryEvent(void* event) const override {
    if (event != nullptr) order_clock(static_cast<EventRecord*>(event)->clock, "Event.query()");
    return true;
  }
  bool queryStream(const c10::Stream& stream) const override {
    order_stream(stream.device_index(), stream.id(), "Stream.query()");
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    const int device = stream.device_index();
    if (graph_on(device, stream.id()) || !captures_refusing(device).empty()) {
      refuse(device, "a stream synchronisation", "Synchronise before or after the capture.");
    }
    check_not_blocked(device, stream.id(), "a stream synchronisation");
    order_stream(device, stream.id(), "a synchronisation of its stream");
  }
  void synchronizeEvent(void* event) const override {
    if (!captures_refusing(t_current_device).empty()) {
      refuse(t_current_device, "an event synchronisation",
             "Synchronise before or after the capture.");
    }
    if (event != nullptr) {
      order_clock(static_cast<EventRecord*>(event)->clock, "Event.synchronize()");
    }
  }
  void synchronizeDevice(const c10::DeviceIndex device) const override {
    if (!captures_refusing(device).empty()) {
      refuse(device, "a device synchronisation (torch.npu.synchronize())",
             "Synchronise before or after the capture.");
    }
    if (any_blocked(device)) {
      TORCH_CHECK(false, "emulated NPU: torch.npu.synchronize() on npu:", int(device),
                  " while a stream waits for an ExternalEvent that nothing has recorded: "
                  "on an NPU this hangs. Record the event first.");
    }
    order_device(device, "a device synchronisation (torch.npu.synchronize())");
  }
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
  if (t.numel() > 0) {
    const size_t needed = at::detail::computeStorageNbytes(
        t.sizes(), t.strides(), t.dtype().itemsize(), t.storage_offset());
    TORCH_CHECK(storage.nbytes() >= needed,
                "emulated NPU: a tensor of ", needed, " bytes whose device memory was "
                "released (its storage holds ", storage.nbytes(), " bytes, e.g. after sleep "
                "mode freed it); wake the engine (wake_up) before using it");
  }
  if (storage.nbytes() > 0) {
    const std::string why = unmapped_reason(storage.data(), storage.nbytes());
    TORCH_CHECK(why.empty(), "emulated NPU: a tensor whose device memory was released: ", why,
                ", e.g. by sleep mode; wake the engine (wake_up) before using it");
  }
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

// ---- what a capture records ------------------------------------------------------------

Block* block_of(const at::Tensor& t) {
  if (!t.has_storage()) return nullptr;
  const auto& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &free_block) return nullptr;
  return static_cast<Block*>(dp.get_context());
}

// The tensor as the graph addresses it: its geometry now, over its memory. Memory of the
// graph's own pool is addressed without owning it (the pool keeps it, and a block freed
// during the capture may be reused by a later op, as on a device); other memory (inputs,
// weights, caches) is kept alive by the record. Host scalars are taken by value.
at::Tensor record_tensor(const Graph& g, const at::Tensor& t) {
  if (!t.defined()) return t;
  if (t.device().type() != kNpu) return t.dim() == 0 ? t.clone() : t;
  Block* block = block_of(t);
  c10::Storage storage = t.storage();
  if (block != nullptr && block->pool == g.pool) {
    void* data = t.storage().mutable_data();
    storage = c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                           c10::DataPtr(data, data, &noop_delete, t.device()), nullptr, false);
  } else if (storage.nbytes() > 0) {
    g.addressed.emplace_back(storage, storage.data());
  }
  return device_view(storage, t.dtype(), t.sizes(), t.strides(), t.storage_offset());
}

c10::IValue record_value(const Graph& g, const c10::IValue& v) {
  if (v.isTensor()) return record_tensor(g, v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const auto& t : v.toTensorList()) out.push_back(record_tensor(g, t));
    return out;
  }
  if (v.isList()) {
    bool has_tensor = false;
    for (const auto& e : v.toListRef()) has_tensor |= e.isTensor();
    if (has_tensor) {
      c10::List<std::optional<at::Tensor>> out;
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) {
          out.push_back(record_tensor(g, e.toTensor()));
        } else {
          out.push_back(std::nullopt);
        }
      }
      return out;
    }
  }
  return v;
}

void note_recorded(Graph& g, int64_t stream, const std::string& name) {
  ++g.seq;
  if (stream != g.stream) {
    auto& side = g.side[stream];
    side.last = g.seq;
    side.last_op = name;
  }
}

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

bool is_pinned(const at::Tensor& t) {
  if (!t.has_storage()) return false;
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  return g_pinned.count(t.storage().data()) > 0;
}

bool is_pinned_at(const void* data) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  return g_pinned.count(data) > 0;
}

// What a copy tells about copies in flight: a non_blocking one from pinned memory is one
// (a pageable source is staged before the call returns); a blocking one, or a copy to the
// host that waits (to pageable memory, or blocking), orders its stream's copies on the host.
void track_copy(const at::Tensor& src, const at::Tensor& dst, bool src_dev, bool dst_dev,
                bool non_blocking, int device) {
  const int64_t stream = t_current_stream[device];
  if (!src_dev && dst_dev) {
    if (non_blocking && src.is_contiguous() && src.numel() > 0 && is_pinned(src)) {
      copy_in_flight(static_cast<const char*>(src.data_ptr()), src.nbytes(), {device, stream},
                     false);
    } else if (!non_blocking) {
      order_stream(device, stream, "a blocking host-to-device copy on its stream");
    }
  } else if (src_dev && !dst_dev) {
    const bool pinned_dst = dst.has_storage() && is_pinned_at(dst.storage().data());
    if (pinned_dst && dst.numel() > 0) {
      const auto* start = static_cast<const char*>(dst.storage().data()) +
                          dst.storage_offset() * static_cast<int64_t>(dst.element_size());
      forget_in_flight(start, at::detail::computeStorageNbytes(
                                  dst.sizes(), dst.strides(), dst.element_size(), 0));
    }
    if (!(non_blocking && pinned_dst)) {
      order_stream(device, stream, "a device-to-host copy that waits for its stream");
    }
  }
}

at::Tensor npu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const bool src_dev = self.device().type() == kNpu;
  const bool dst_dev = dst.device().type() == kNpu;
  const int64_t bytes = self.numel() * static_cast<int64_t>(self.element_size());
  std::shared_ptr<Graph> graph;
  if (!t_uncounted) {
    const int device = src_dev ? self.device().index() : dst.device().index();
    if (src_dev && !dst_dev) {
      if (!captures_refusing(device).empty()) {
        refuse(device, "aten::_copy_from, a device-to-host copy (.cpu(), .tolist(), .numpy(), "
               ".to('cpu'), a host tensor made from device data)", kReadFix);
      }
      check_not_blocked(device, t_current_stream[device], "a device-to-host copy");
    } else {
      if (!src_dev && !(non_blocking && is_pinned(self)) && !captures_refusing(device).empty()) {
        // A copy from pageable memory (or a blocking one) returns only when it is done.
        refuse(device, "aten::_copy_from, a host-to-device copy from pageable host memory or "
               "with non_blocking=False (.to('npu'), torch.tensor(..., device='npu'); it "
               "waits for the host)",
               "Copy into the device buffers before the captured region, or from pinned "
               "memory with non_blocking=True.");
      }
      check_not_blocked(device, t_current_stream[device], "aten::copy_");
    }
    graph = graph_on_current(device);
    if (!graph) track_copy(self, dst, src_dev, dst_dev, non_blocking, device);
  }
  if (graph) {
    // Captured: a copy node over the same memory (a host source is read again at each
    // replay, as a captured copy from pinned memory is).
    std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
    Node node;
    node.kind = 1;
    node.src = src_dev ? record_tensor(*graph, self) : self;
    node.dst = record_tensor(*graph, dst);
    graph->nodes.push_back(std::move(node));
    note_recorded(*graph, t_current_stream[graph->device], "aten::copy_");
  }
  if (t_uncounted) {
  } else if (src_dev && !dst_dev) {
    g_counters.d2h_copies.fetch_add(1);
    g_counters.d2h_bytes.fetch_add(bytes);
    tell_launch_hook("copy:d2h");
  } else if (!src_dev && dst_dev) {
    g_counters.h2d_copies.fetch_add(1);
    g_counters.h2d_bytes.fetch_add(bytes);
    tell_launch_hook("copy:h2d");
  } else {
    g_counters.d2d_copies.fetch_add(1);
    tell_launch_hook("copy:d2d");
  }
  // Both sides are host memory: the CPU copy kernel converts dtypes and strides.
  host_view(dst).copy_(host_view(self));
  return dst;
}

// Moves the storage to fresh memory of `nbytes` (keeping the common prefix) and frees the
// old memory, as torch_npu's storage resize does: resize_(0) releases a storage's device
// memory while its tensors live on (FSDP, sleep mode), and growing it back gets new memory
// at a new address.
void reallocate_storage(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  c10::DeviceGuard guard(storage.device());
  auto fresh = nbytes ? g_allocator.allocate(nbytes)
                      : c10::DataPtr(nullptr, c10::Device(kNpu, storage.device().index()));
  const size_t kept = std::min(nbytes, storage.nbytes());
  if (kept > 0) std::memcpy(fresh.get(), storage.data(), kept);
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

void resize_storage(const c10::Storage& storage, size_t nbytes) {
  if (nbytes <= storage.nbytes()) return;
  reallocate_storage(storage, nbytes);
}

void NpuHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  if (newsize != storage.nbytes()) reallocate_storage(storage, newsize);
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
  if (!t_uncounted) {
    const int device = self.device().index();
    if (!captures_refusing(device).empty()) {
      refuse(device, "aten::_local_scalar_dense, a scalar read (.item(), int(t), float(t), "
             "bool(t), an `if` on a device value)", kReadFix);
    }
    check_not_blocked(device, t_current_stream[device], "a scalar read (.item())");
    g_counters.scalar_reads.fetch_add(1);
    order_stream(device, t_current_stream[device], "a scalar read (.item()) on its stream");
  }
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

// Device tensors on the stack become host views of the same memory (`replaced` says
// which, and which the op writes); an npu device argument becomes cpu.
void hostify(const c10::FunctionSchema& schema, torch::jit::Stack& stack, size_t start,
             std::vector<Replaced>& replaced) {
  bool written = false;
  auto replace = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || t.device().type() != kNpu) return t;
    auto host = host_alias(t);
    replaced.push_back({t, host, t.storage().data(), written});
    return host;
  };
  for (size_t i = start; i < stack.size(); ++i) {
    const auto* alias = schema.arguments()[i - start].alias_info();
    written = alias != nullptr && alias->isWrite();
    auto& v = stack[i];
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
}

bool is_fresh(const at::Tensor& out, const std::vector<Replaced>& replaced) {
  if (!out.defined() || !out.is_cpu()) return false;
  for (const auto& r : replaced) {
    if (out.is_same(r.host)) return false;
    if (out.has_storage() && out.storage().data() == r.data) return false;
  }
  return true;
}

void npu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto num_args = schema.arguments().size();
  const auto start = stack->size() - num_args;
  const std::string name = schema.operator_name().name +
                           (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  const bool waits = !t_uncounted && waits_for_host(op, *stack, start);
  if (!t_uncounted) {
    count_op(name);
    if (waits) g_counters.dynamic_shape_ops.fetch_add(1);
  }

  std::vector<at::Tensor> tensors;
  std::optional<at::Device> where;
  const auto& base = op.schema().operator_name().name;
  const bool indexes = base == "aten::index" || base == "aten::index_put_" ||
                       base == "aten::index_put" || base == "aten::_index_put_impl_";
  for (size_t i = start; i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    if (v.isTensor()) {
      tensors.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorList()) tensors.push_back(t);
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) {
        if (!e.isTensor()) continue;
        const auto& t = e.toTensor();
        if (indexes && t.defined() && t.is_cpu()) {
          // Advanced indexing takes index tensors on the CPU too ("indices should be either
          // on cpu or on the same device as the indexed tensor"): torch copies them over.
          g_counters.h2d_copies.fetch_add(1);
          g_counters.h2d_bytes.fetch_add(static_cast<int64_t>(t.nbytes()));
          continue;
        }
        tensors.push_back(t);
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
  const int index = device.index();
  std::shared_ptr<Graph> graph;
  if (!t_uncounted) {
    if (waits && !captures_refusing(index).empty()) {
      refuse(index, name + ", an op whose output size depends on device data (the host "
             "waits for it: nonzero, masked_select, unique, a boolean-mask index, "
             "repeat_interleave without output_size)",
             "Give the output a fixed size (output_size=, a padded index, torch.where).");
    }
    check_not_blocked(index, t_current_stream[index], name);
    graph = graph_on_current(index);
    if (waits && !graph) order_stream(index, t_current_stream[index], name + " (it waits for its stream)");
  }
  c10::DeviceGuard guard(device);

  std::vector<c10::IValue> recorded;
  if (graph) {
    for (size_t i = start; i < stack->size(); ++i) recorded.push_back(record_value(*graph, (*stack)[i]));
  }

  std::vector<Replaced> replaced;
  hostify(schema, *stack, start, replaced);

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  for (const auto& r : replaced) write_back(r);

  // Outputs: host views of device memory go back as the device tensors; new host
  // tensors are copied into device memory.
  const auto num_returns = schema.returns().size();
  const auto out_start = stack->size() - num_returns;
  std::vector<c10::IValue> outs;
  for (size_t i = out_start; i < stack->size(); ++i) {
    auto& v = (*stack)[i];
    if (v.isTensor()) {
      const bool fresh = is_fresh(v.toTensor(), replaced);
      v = to_device_output(v.toTensor(), replaced, device);
      if (graph) outs.push_back(fresh ? record_tensor(*graph, v.toTensor()) : at::Tensor());
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> fresh;
      c10::List<at::Tensor> kept;
      for (const auto& t : v.toTensorList()) {
        const bool is_new = is_fresh(t, replaced);
        fresh.push_back(to_device_output(t, replaced, device));
        if (graph) kept.push_back(is_new ? record_tensor(*graph, fresh.get(fresh.size() - 1)) : at::Tensor());
      }
      v = fresh;
      if (graph) outs.push_back(kept);
    } else if (graph) {
      outs.push_back(c10::IValue());
    }
  }
  if (graph) {
    std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
    Node node;
    node.kind = 0;
    node.op = op;
    node.args = std::move(recorded);
    node.outs = std::move(outs);
    graph->nodes.push_back(std::move(node));
    note_recorded(*graph, t_current_stream[index], name);
  }
}

// ---- replay ------------------------------------------------------------------------------

void replay_aten(const Node& node) {
  const auto& schema = node.op->schema();
  torch::jit::Stack stack(node.args.begin(), node.args.end());
  std::vector<Replaced> replaced;
  hostify(schema, stack, 0, replaced);
  node.op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
  for (const auto& r : replaced) {
    TORCH_CHECK(!r.written || r.host.storage().data() == r.data,
                "emulated NPU replay: ", schema.operator_name().name,
                " resized an output it wrote at capture; a replay cannot move memory");
  }
  const auto out_start = stack.size() - schema.returns().size();
  for (size_t i = 0; i < node.outs.size() && out_start + i < stack.size(); ++i) {
    const auto& captured = node.outs[i];
    const auto& v = stack[out_start + i];
    if (captured.isTensor()) {
      const auto& dst = captured.toTensor();
      if (dst.defined() && v.isTensor()) host_alias(dst).copy_(v.toTensor());
    } else if (captured.isTensorList() && v.isTensorList()) {
      auto dsts = captured.toTensorList();
      auto srcs = v.toTensorList();
      for (size_t j = 0; j < dsts.size() && j < srcs.size(); ++j) {
        const at::Tensor dst = dsts.get(j);
        if (dst.defined()) host_alias(dst).copy_(srcs.get(j));
      }
    }
  }
}

struct ReplayScope {
  bool uncounted, scratch;
  ReplayScope() : uncounted(t_uncounted), scratch(t_scratch) {
    t_uncounted = true;
    t_scratch = true;
  }
  ~ReplayScope() {
    t_uncounted = uncounted;
    t_scratch = scratch;
  }
};

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
      {"graph_captures", g_counters.graph_captures.load()},
      {"graph_replays", g_counters.graph_replays.load()},
      {"graph_replayed_ops", g_counters.graph_replayed_ops.load()},
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
  g_counters.graph_captures = 0;
  g_counters.graph_replays = 0;
  g_counters.graph_replayed_ops = 0;
  std::lock_guard<std::mutex> lock(g_op_mutex);
  g_op_counts.clear();
}

std::map<std::string, int64_t> memory(int device) {
  check_index(static_cast<c10::DeviceIndex>(device));
  return {{"allocated", g_memory[device].allocated.load()},
          {"peak", g_memory[device].peak.load()},
          {"allocations", g_memory[device].allocations.load()},
          {"graph_pools", g_memory[device].graph_pools.load()},
          {"capacity", g_capacity.load()}};
}

void reset_peak(int device) {
  check_index(static_cast<c10::DeviceIndex>(device));
  g_memory[device].peak.store(g_memory[device].allocated.load());
}

// ---- graphs: the Python side's entry points ----------------------------------------------

std::shared_ptr<Graph> find_graph(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  auto it = g_graphs.find(id);
  TORCH_CHECK(it != g_graphs.end(), "emulated NPU: no graph ", id);
  return it->second;
}

int64_t graph_new() {
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  const int64_t id = g_next_graph.fetch_add(1);
  auto g = std::make_shared<Graph>();
  g->id = id;
  g_graphs[id] = g;
  return id;
}

int64_t pool_new() { return g_next_pool.fetch_add(1); }

// The last graph using a pool is gone: its free blocks go back to the device; blocks that
// tensors still hold become ordinary memory, freed with their tensors.
void pool_unref(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  auto it = g_pools.find(id);
  if (it == g_pools.end() || --it->second.graphs > 0) return;
  Pool pool = std::move(it->second);
  g_pools.erase(it);
  g_memory[pool.device].graph_pools.fetch_sub(pool.reserved);
  std::set<Block*> free_blocks;
  for (auto& [bytes, block] : pool.free) free_blocks.insert(block);
  for (Block* block : pool.blocks) {
    if (free_blocks.count(block)) {
      release_block(block);
    } else {
      block->pool = 0;
    }
  }
}

void end_capture_locked(Graph& g) {
  for (auto it = g_capturing.begin(); it != g_capturing.end();) {
    it = it->second == g.id ? g_capturing.erase(it) : std::next(it);
  }
  if (g.capturing) g_captures_underway.fetch_sub(1);
  g.capturing = false;
}

void capture_begin(int64_t id, int64_t pool, const std::string& mode) {
  TORCH_CHECK(mode == "global" || mode == "thread_local" || mode == "relaxed",
              "capture_error_mode must be \"global\", \"thread_local\" or \"relaxed\", not \"",
              mode, "\"");
  const int device = t_current_device;
  const int64_t stream = t_current_stream[device];
  TORCH_CHECK(stream != 0, "NPU graphs must be captured on a non-default stream (emulated NPU: "
              "npu:", device, " is on its default stream; torch.npu.graph uses a side stream "
              "of its own, or capture under `with torch.npu.stream(torch.npu.Stream()):`)");
  check_not_blocked(device, stream, "NPUGraph.capture_begin");
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  auto g = find_graph(id);
  TORCH_CHECK(!g->captured, "This NPUGraph instance already owns a captured graph (emulated "
              "NPU): reset() it, or capture into a new NPUGraph");
  TORCH_CHECK(!g->capturing, "NPUGraph.capture_begin: this graph is already capturing");
  TORCH_CHECK(!g_capturing.count({device, stream}), "NPUGraph.capture_begin: stream ", stream,
              " on npu:", device, " is already capturing another graph");
  if (pool == 0) pool = pool_new();
  auto& p = g_pools[pool];
  TORCH_CHECK(p.graphs == 0 || p.device == device, "NPUGraph.capture_begin: pool ", pool,
              " belongs to npu:", p.device, ", not npu:", device);
  p.device = device;
  p.graphs++;
  g->device = device;
  g->stream = stream;
  g->pool = pool;
  g->mode = mode;
  g->thread = std::this_thread::get_id();
  g->capturing = true;
  g->nodes.clear();
  g->side.clear();
  g->seq = 0;
  g->invalid.clear();
  g_capturing[{device, stream}] = id;
  g_captures_underway.fetch_add(1);
}

void capture_end(int64_t id) {
  std::shared_ptr<Graph> g = find_graph(id);
  std::string failure;
  {
    std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
    TORCH_CHECK(g->capturing, "NPUGraph.capture_end: the graph is not capturing");
    const int64_t here = t_current_stream[g->device];
    if (here != g->stream) {
      failure = "NPUGraph.capture_end on stream " + std::to_string(here) +
                ", not on the capturing stream " + std::to_string(g->stream);
    }
    for (const auto& [stream, side] : g->side) {
      if (failure.empty() && side.last > side.joined) {
        failure = "work on stream " + std::to_string(stream) + " (last: " + side.last_op +
                  ") was forked into the capture but not joined back into the capturing "
                  "stream " + std::to_string(g->stream) +
                  ": record an event on it after its work and make the capturing stream "
                  "wait for it (capture_stream.wait_stream(side_stream))";
      }
    }
    if (failure.empty() && !g->invalid.empty()) {
      failure = "the capture was invalidated: " + g->invalid;
    }
    end_capture_locked(*g);
    if (failure.empty()) {
      g->captured = true;
      g_counters.graph_captures.fetch_add(1);
      return;
    }
  }
  std::vector<Node> dropped;
  {
    std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
    dropped.swap(g->nodes);
  }
  dropped.clear();
  pool_unref(g->pool);
  g->pool = 0;
  TORCH_CHECK(false, "emulated NPU: NPUGraph.capture_end failed: ", failure);
}

void graph_reset(int64_t id) {
  std::shared_ptr<Graph> g;
  {
    std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
    auto it = g_graphs.find(id);
    if (it == g_graphs.end()) return;
    g = it->second;
    end_capture_locked(*g);
    it->second = std::make_shared<Graph>();
    it->second->id = id;
  }
  const int64_t pool = g->pool;
  const bool held = g->captured || !g->nodes.empty() || pool != 0;
  g.reset();  // drops the record (and what it kept alive) outside the lock
  if (held && pool != 0) pool_unref(pool);
}

void graph_delete(int64_t id) {
  graph_reset(id);
  std::shared_ptr<Graph> g;
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  g_graphs.erase(id);
}

int64_t capture_of(int device, int64_t stream) {
  auto g = graph_on(device, stream);
  return g ? g->id : 0;
}

void record_python_node(int64_t id, int64_t py_index, int64_t stream, const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  auto g = find_graph(id);
  TORCH_CHECK(g->capturing, "emulated NPU: graph ", id, " is not capturing");
  Node node;
  node.kind = 2;
  node.py_index = py_index;
  g->nodes.push_back(std::move(node));
  note_recorded(*g, stream, name);
}

// Runs the record from `start`; a Python node runs through `callback(py_index)`, which
// returns False to pause (a wait for an ExternalEvent not yet recorded). Returns where it
// stopped: the number of nodes when the replay is complete.
int64_t graph_replay(int64_t id, int64_t start, py::function callback) {
  auto g = find_graph(id);
  TORCH_CHECK(g->captured, "Called NPUGraph::replay without a preceding successful capture "
              "(emulated NPU: capture it first; reset() drops a capture)");
  const int device = t_current_device;
  TORCH_CHECK(!graph_on_current(device), "NPUGraph.replay inside a capture is not emulated");
  if (start == 0) {
    check_not_blocked(device, t_current_stream[device], "NPUGraph.replay");
    g_counters.graph_replays.fetch_add(1);
  }
  if (start == 0) {
    // A real graph addresses memory by its address at capture: memory released or moved
    // since (a storage resized, e.g. by sleep mode) would be read at its old address.
    for (const auto& [storage, data] : g->addressed) {
      TORCH_CHECK(storage.data() == data,
                  "emulated NPU: NPUGraph.replay of a graph that addresses device memory "
                  "released or moved since its capture (", storage.nbytes(), " bytes, "
                  "captured at ", data, ", now at ", storage.data(), "); recapture the "
                  "graph once the memory is back");
    }
  }
  ReplayScope scope;
  c10::DeviceGuard guard(c10::Device(kNpu, static_cast<c10::DeviceIndex>(g->device)));
  const int64_t n = static_cast<int64_t>(g->nodes.size());
  for (int64_t i = start; i < n; ++i) {
    const Node& node = g->nodes[i];
    if (node.kind == 0) {
      replay_aten(node);
    } else if (node.kind == 1) {
      const auto& src = node.src;
      if (src.is_cpu() && src.is_contiguous() && src.numel() > 0 && is_pinned(src)) {
        copy_in_flight(static_cast<const char*>(src.data_ptr()), src.nbytes(),
                       {device, t_current_stream[device]}, true);
      }
      host_view(node.dst).copy_(host_view(node.src));
    } else if (!callback(node.py_index).cast<bool>()) {
      return i;
    }
    g_counters.graph_replayed_ops.fetch_add(1);
  }
  return n;
}

std::map<std::string, int64_t> graph_info(int64_t id) {
  auto g = find_graph(id);
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  std::map<std::string, int64_t> out{{"nodes", static_cast<int64_t>(g->nodes.size())},
                                     {"pool", g->pool},
                                     {"captured", g->captured},
                                     {"capturing", g->capturing},
                                     {"device", g->device},
                                     {"stream", g->stream}};
  auto p = g_pools.find(g->pool);
  out["pool_bytes"] = p == g_pools.end() ? 0 : p->second.reserved;
  int64_t free_bytes = 0;
  if (p != g_pools.end()) {
    for (const auto& [bytes, block] : p->second.free) free_bytes += static_cast<int64_t>(bytes);
  }
  out["pool_free_bytes"] = free_bytes;
  return out;
}

std::vector<std::string> graph_nodes(int64_t id) {
  auto g = find_graph(id);
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  std::vector<std::string> out;
  for (const auto& node : g->nodes) {
    if (node.kind == 0) {
      const auto& schema = node.op->schema();
      out.push_back(schema.operator_name().name +
                    (schema.overload_name().empty() ? "" : "." + schema.overload_name()));
    } else if (node.kind == 1) {
      out.push_back("aten::copy_");
    } else {
      out.push_back("python:" + std::to_string(node.py_index));
    }
  }
  return out;
}

void set_blocked(int device, int64_t stream, const std::string& why) {
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  const bool fresh = g_blocked.emplace(std::make_pair(device, stream), why).second;
  if (fresh) g_blocked_streams.fetch_add(1);
}

void clear_blocked(int device, int64_t stream) {
  std::lock_guard<std::recursive_mutex> lock(g_graph_mutex);
  if (g_blocked.erase({device, stream})) g_blocked_streams.fetch_sub(1);
}

// A tensor over the same memory that does not keep it alive (torch_npu._C._weak_ref_tensor).
at::Tensor weak_ref(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kNpu) return t;
  void* data = t.storage().mutable_data();
  c10::Storage storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                       c10::DataPtr(data, data, &noop_delete, t.device()), nullptr, false);
  return device_view(storage, t.dtype(), t.sizes(), t.strides(), t.storage_offset());
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
  m.def("set_launch_hook", [](py::object hook) {
    if (g_launch_hook == nullptr) g_launch_hook = new py::object();  // never freed: exit-safe
    *g_launch_hook = std::move(hook);
    g_has_launch_hook.store(!g_launch_hook->is_none());
  });
  m.def("graph_new", &graph_new);
  m.def("pool_new", &pool_new);
  m.def("capture_begin", &capture_begin);
  m.def("capture_end", &capture_end);
  m.def("graph_reset", &graph_reset);
  m.def("graph_delete", &graph_delete);
  m.def("capture_of", &capture_of);
  m.def("capture_of_current", []() {
    return capture_of(t_current_device, t_current_stream[t_current_device]);
  });
  m.def("record_python_node", &record_python_node);
  m.def("graph_replay", &graph_replay);
  m.def("graph_info", &graph_info);
  m.def("graph_nodes", &graph_nodes);
  m.def("set_blocked", &set_blocked);
  m.def("clear_blocked", &clear_blocked);
  m.def("check_not_blocked", [](const std::string& what) {
    check_not_blocked(t_current_device, t_current_stream[t_current_device], what);
  });
  m.def("refuse_if_capturing", [](const std::string& what, const std::string& fix) {
    if (!captures_refusing(t_current_device).empty()) refuse(t_current_device, what, fix);
  });
  m.def("weak_ref", &weak_ref);
  m.def("in_flight", &in_flight_count,
        "Non_blocking copies from pinned memory the host has not ordered yet");
  // torch_npu's MemPool over an NPUPluggableAllocator, and use_mem_pool.
  m.def("mempool_new", [](uint64_t alloc, uint64_t free) {
    TORCH_CHECK(alloc != 0 && free != 0, "MemPool: the allocator's functions are null");
    std::lock_guard<std::mutex> lock(g_mem_pool_mutex);
    const int64_t id = g_next_mem_pool.fetch_add(1);
    g_mem_pools[id] = {reinterpret_cast<void* (*)(size_t, int, void*)>(alloc),
                       reinterpret_cast<void (*)(void*, size_t, int, void*)>(free)};
    return id;
  });
  m.def("allocate_to_pool", [](int device, int64_t id) {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "use_mem_pool: no device ", device);
    if (id != 0) {
      std::lock_guard<std::mutex> lock(g_mem_pool_mutex);
      TORCH_CHECK(g_mem_pools.count(id), "use_mem_pool: no MemPool ", id);
    }
    const int64_t previous = t_mem_pool[device];
    t_mem_pool[device] = id;
    return previous;
  });
  m.def("unmapped", [](uint64_t address) {
    return !unmapped_reason(reinterpret_cast<const void*>(address), 1).empty();
  });
  m.def("vmm_mapped_bytes", []() {
    std::lock_guard<std::mutex> lock(g_vmm_mutex);
    int64_t mapped = 0;
    for (const auto& [address, range] : g_reserved) {
      if (range.mapped != nullptr) mapped += static_cast<int64_t>(range.size);
    }
    return std::map<std::string, int64_t>{{"reserved_ranges", static_cast<int64_t>(g_reserved.size())},
                                          {"mapped_bytes", mapped}};
  });
}

// ---- the emulated ACL functions (declared in include/acl/acl.h) --------------------------
// Called by src/adapters/npu/native/vmm_pool.cpp, compiled into this extension.

extern "C" {

aclError aclrtGetCurrentContext(aclrtContext* context) {
  *context = reinterpret_cast<aclrtContext>(static_cast<uintptr_t>(t_current_device + 1));
  return ACL_SUCCESS;
}

aclError aclrtSetDevice(int32_t device) {
  if (device < 0 || device >= g_device_count.load()) return ACL_ERROR_INVALID_PARAM;
  t_current_device = device;
  return ACL_SUCCESS;
}

aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp*, aclrtMemGranularityOptions,
                                          size_t* granularity) {
  *granularity = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return ACL_SUCCESS;
}

aclError aclrtReserveMemAddress(void** virPtr, size_t size, size_t alignment, void* expectPtr,
                                uint64_t) {
  if (size == 0 || alignment != 0 || expectPtr != nullptr) return ACL_ERROR_INVALID_PARAM;
  void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return ACL_ERROR_RT_MEMORY_ALLOCATION;
  std::lock_guard<std::mutex> lock(g_vmm_mutex);
  g_reserved[reinterpret_cast<uintptr_t>(p)] = Reserved{size, nullptr};
  g_reserved_count.fetch_add(1);
  *virPtr = p;
  return ACL_SUCCESS;
}

aclError aclrtReleaseMemAddress(void* virPtr) {
  std::lock_guard<std::mutex> lock(g_vmm_mutex);
  auto it = g_reserved.find(reinterpret_cast<uintptr_t>(virPtr));
  // A range still mapped is refused, as ACL refuses it: unmap it first.
  if (it == g_reserved.end() || it->second.mapped != nullptr) return ACL_ERROR_INVALID_PARAM;
  munmap(virPtr, it->second.size);
  g_reserved.erase(it);
  g_reserved_count.fetch_sub(1);
  return ACL_SUCCESS;
}

aclError aclrtMallocPhysical(aclrtDrvMemHandle* handle, size_t size,
                             const aclrtPhysicalMemProp* prop, uint64_t) {
  const int device = prop != nullptr ? static_cast<int>(prop->location.id) : t_current_device;
  if (size == 0 || device < 0 || device >= g_device_count.load()) return ACL_ERROR_INVALID_PARAM;
  auto& mem = g_memory[device];
  if (mem.allocated.load() + static_cast<int64_t>(size) > g_capacity.load()) {
    return ACL_ERROR_RT_MEMORY_ALLOCATION;
  }
  const int fd = memfd_create("emulated-npu-physical", MFD_CLOEXEC);
  if (fd < 0) return ACL_ERROR_RT_MEMORY_ALLOCATION;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return ACL_ERROR_RT_MEMORY_ALLOCATION;
  }
  *handle = new Physical{fd, size, device, 0};
  const int64_t now = mem.allocated.fetch_add(static_cast<int64_t>(size)) + static_cast<int64_t>(size);
  int64_t peak = mem.peak.load();
  while (now > peak && !mem.peak.compare_exchange_weak(peak, now)) {
  }
  mem.allocations.fetch_add(1);
  return ACL_SUCCESS;
}

aclError aclrtFreePhysical(aclrtDrvMemHandle handle) {
  auto* physical = static_cast<Physical*>(handle);
  if (physical == nullptr) return ACL_ERROR_INVALID_PARAM;
  {
    std::lock_guard<std::mutex> lock(g_vmm_mutex);
    if (physical->maps > 0) return ACL_ERROR_INVALID_PARAM;  // still mapped somewhere
  }
  close(physical->fd);
  g_memory[physical->device].allocated.fetch_sub(static_cast<int64_t>(physical->size));
  g_memory[physical->device].allocations.fetch_sub(1);
  delete physical;
  return ACL_SUCCESS;
}

aclError aclrtMapMem(void* virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                     uint64_t) {
  auto* physical = static_cast<Physical*>(handle);
  std::lock_guard<std::mutex> lock(g_vmm_mutex);
  auto it = g_reserved.find(reinterpret_cast<uintptr_t>(virPtr));
  if (physical == nullptr || it == g_reserved.end() || it->second.mapped != nullptr ||
      size != it->second.size || offset + size > physical->size) {
    return ACL_ERROR_INVALID_PARAM;
  }
  void* p = mmap(virPtr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, physical->fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return ACL_ERROR_RT_MEMORY_ALLOCATION;
  it->second.mapped = physical;
  physical->maps += 1;
  return ACL_SUCCESS;
}

aclError aclrtUnmapMem(void* virPtr) {
  std::lock_guard<std::mutex> lock(g_vmm_mutex);
  auto it = g_reserved.find(reinterpret_cast<uintptr_t>(virPtr));
  if (it == g_reserved.end() || it->second.mapped == nullptr) return ACL_ERROR_INVALID_PARAM;
  // The addresses stay reserved (no access); the physical pages leave them.
  void* p = mmap(virPtr, it->second.size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return ACL_ERROR_INVALID_PARAM;
  it->second.mapped->maps -= 1;
  it->second.mapped = nullptr;
  return ACL_SUCCESS;
}

aclError aclrtMemcpy(void* dst, size_t destMax, const void* src, size_t count,
                     aclrtMemcpyKind kind) {
  if (count > destMax) return ACL_ERROR_INVALID_PARAM;
  const bool to_device = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  const bool from_device = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  if ((to_device && !unmapped_reason(dst, count).empty()) ||
      (from_device && !unmapped_reason(src, count).empty())) {
    return ACL_ERROR_INVALID_PARAM;
  }
  std::memcpy(dst, src, count);
  if (kind == ACL_MEMCPY_DEVICE_TO_HOST) {
    g_counters.d2h_copies.fetch_add(1);
    g_counters.d2h_bytes.fetch_add(static_cast<int64_t>(count));
  } else if (kind == ACL_MEMCPY_HOST_TO_DEVICE) {
    g_counters.h2d_copies.fetch_add(1);
    g_counters.h2d_bytes.fetch_add(static_cast<int64_t>(count));
  }
  return ACL_SUCCESS;
}

aclError aclrtMemset(void* devPtr, size_t maxCount, int32_t value, size_t count) {
  if (count > maxCount || !unmapped_reason(devPtr, count).empty()) return ACL_ERROR_INVALID_PARAM;
  std::memset(devPtr, value, count);
  return ACL_SUCCESS;
}

}  // extern "C"

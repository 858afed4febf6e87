// Grow-only scratch buffers for the host's native ops, one set per calling thread.
//
// A buffer of a few hundred KB from malloc is fresh pages from the kernel on every call
// (glibc maps large blocks and trims its heap on free), and their first writes fault: at
// a 1024-token prefill of the benchmark's small Qwen3-MoE the MoE experts' three buffers
// took 1.3 ms of faults in a call of 2.4 ms (Intel, 2 threads). These keep their pages:
// slot i of the calling thread grows to the largest size asked for and stays, so a server
// holds its largest prefill's scratch per thread that calls the op (a few MB at the
// benchmark's sizes; rows x (hidden + intermediate) x 2 bytes per MoE layer call).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace ascend_host {

// Slots of the calling thread: a caller owns its slot numbers for the length of a call
// (the MoE experts use 0 to 2). 64-byte aligned; the contents are not kept between calls.
template <typename T>
T* scratch(int slot, int64_t count) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  struct Buffer {
    std::unique_ptr<void, Free> data;
    size_t bytes = 0;
  };
  thread_local std::array<Buffer, 4> buffers;
  Buffer& buffer = buffers.at(static_cast<size_t>(slot));
  const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + 63) / 64 * 64;
  if (bytes > buffer.bytes) {
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    buffer.data.reset(p);
    buffer.bytes = bytes;
  }
  return static_cast<T*>(buffer.data.get());
}

}  // namespace ascend_host

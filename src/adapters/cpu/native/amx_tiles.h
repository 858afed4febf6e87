// Intel AMX (tile registers and TDPBF16PS) for the host's bf16 GEMMs: whether this build
// and this process can use them, and the one tile shape the kernels use.
//
// A build for a CPU with AMX-TILE and AMX-BF16 (-march=native on Sapphire Rapids and
// later) has the tile kernels. Linux hands a process the tile state only on request
// (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA); without it the first tile instruction
// stops the process, so `amx_ready` asks once and the kernels run only where it was
// granted. The grant is the process's permission to use AMX (oneDNN asks for the same one
// for its own AMX kernels); it changes nothing else.
//
// Every tile is 16 rows of 64 bytes: 16 x 16 float32 (an output block), 16 x 32 bf16 (a
// block of 16 rows of A, 32 of K), or 16 pairs of k x 16 columns x 2 bf16 (B in the pair
// layout TDPBF16PS reads: row s holds (b[2s][n], b[2s + 1][n]) for n = 0 .. 15). A
// thread loads the configuration before its tiles and releases them after
// (`TileScope`), so no tile state outlives a kernel's parallel chunk.
#pragma once

#include <cstdint>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define ASCEND_AMX_BF16 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ascend_host {
namespace amx {

// Rows of a tile; K of one bf16 step (a tile of A is 16 rows x 32 k).
constexpr int64_t kRows = 16;
constexpr int64_t kStepK = 32;

#if defined(ASCEND_AMX_BF16)
// Whether the tile kernels run in this process: built with AMX, and Linux granted the
// tile state (asked once, on first use).
inline bool amx_ready() {
  static const bool granted = [] {
    constexpr long kReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kXtileData = 18;         // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return granted;
}

// The configuration of all eight tiles as 16 x 64 bytes (palette 1), loaded on entry and
// released on exit of a scope.
struct TileScope {
  TileScope() {
    alignas(64) uint8_t config[64] = {};
    config[0] = 1;  // palette 1
    auto* colsb = reinterpret_cast<uint16_t*>(config + 16);
    uint8_t* rows = config + 48;
    for (int t = 0; t < 8; ++t) {
      colsb[t] = 64;
      rows[t] = static_cast<uint8_t>(kRows);
    }
    _tile_loadconfig(config);
  }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};
#else
inline bool amx_ready() { return false; }
#endif

}  // namespace amx
}  // namespace ascend_host

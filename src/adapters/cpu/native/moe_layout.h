// The rows of one MoE experts call, bucketed by expert (moe_experts.cpp): what both of its
// GEMM paths (the dot kernels, the AMX tiles of moe_experts_amx.cpp) read.
#pragma once

#include <cstdint>
#include <vector>

namespace ascend_host {
namespace moe {

struct Layout {
  int64_t tokens, hidden, top_k, experts, inter;
  std::vector<int64_t> offsets;  // [E + 1]: rows of expert e are [offsets[e], offsets[e+1])
  std::vector<int64_t> slot_of_row;  // [N]: flat (token, slot) index of each row
  std::vector<int64_t> row_of_slot;  // [T * k]: row of each slot, -1 if left out
};

}  // namespace moe
}  // namespace ascend_host

"""M-RoPE's per-token cos/sin rows, in plain torch: what both devices' `mrope` rotate by."""

from __future__ import annotations

import torch


def mrope_cos_sin(
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    mrope_section: tuple[int, int, int],
    interleaved: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each [T, rotary_dim / 2] in the cache's dtype: frequency j of token i from
    the cache row of the position (positions [3, T]) of j's section (ports.ops.Ops.mrope)."""
    cos, sin = cos_sin_cache[positions.long()].chunk(2, dim=-1)  # [3, T, rotary_dim / 2]
    half = cos.shape[-1]
    if sum(mrope_section) != half:
        raise ValueError(
            f"M-RoPE: mrope_section {list(mrope_section)} sums to {sum(mrope_section)}, not "
            f"rotary_dim / 2 = {half} (the cos/sin cache's width / 2); the model's "
            "rope_parameters.mrope_section must cover every rotary frequency."
        )
    source = _section_of_frequency(mrope_section, interleaved, half, cos.device)
    return _pick(cos, source), _pick(sin, source)


def _section_of_frequency(
    section: tuple[int, int, int], interleaved: bool, half: int, device: torch.device
) -> torch.Tensor:
    """[half] int64: 0 (temporal), 1 (height) or 2 (width) for each frequency."""
    j = torch.arange(half, device=device)
    if interleaved:
        height = (j % 3 == 1) & (j < 3 * section[1])
        width = (j % 3 == 2) & (j < 3 * section[2])
        return torch.where(height, 1, torch.where(width, 2, 0))
    return (j >= section[0]).long() + (j >= section[0] + section[1]).long()


def _pick(rows: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """rows [3, T, half] -> [T, half], frequency j from rows[source[j]]."""
    index = source.view(1, 1, -1).expand(1, rows.shape[1], -1)
    return rows.gather(0, index).squeeze(0)

"""`--enable-eplb` held past vLLM's config check, given back by the plan.

vLLM 0.33's ParallelConfig refuses enable_eplb on every platform but CUDA, ROCm and XPU
while the config is built, before any platform hook can plan, and refuses redundant
experts without it. pre_register_and_update (first thing in create_engine_config) takes
both off the EngineArgs and keeps what the operator gave; the translation reads them from
here, and the plan's changes (ascend_core/plan/eplb.py) write EPLB back onto the config,
with their reasons, before any worker reads it. The held values belong to this process's
one config build.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ascend_core.deployment import EplbSettings
from ascend_core.moe.eplb import eplb_settings_from

_held: dict[str, EplbSettings] = {}


def hold(engine_args: Any) -> None:
    """Take --enable-eplb and its redundant experts off the EngineArgs vLLM builds from."""
    _held.clear()
    if engine_args is None or not getattr(engine_args, "enable_eplb", False):
        return
    config = engine_args.eplb_config
    raw = config if isinstance(config, dict) else dataclasses.asdict(config)
    _held["settings"] = eplb_settings_from(True, raw)
    engine_args.enable_eplb = False
    if isinstance(config, dict):
        engine_args.eplb_config = {**config, "num_redundant_experts": 0}
    else:
        engine_args.eplb_config = dataclasses.replace(config, num_redundant_experts=0)


def settings_of(parallel_config: Any) -> EplbSettings:
    """What the operator asked of EPLB: the held settings, else the config's own."""
    held = _held.get("settings")
    if held is not None and not parallel_config.enable_eplb:
        return held
    return eplb_settings_from(
        bool(parallel_config.enable_eplb), dataclasses.asdict(parallel_config.eplb_config)
    )

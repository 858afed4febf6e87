"""`ascend-doctor pair`: a prefill and a decode `vllm serve` checked together before load.

Each side is planned as `plan` plans it; the core (ascend_core.kv_transfer) says what the
two must agree on; the KV bytes per token are those the prefill side sends per token; the
`router` section gives the vllm-router line that sends requests to the pair with Mooncake's
transfer parameters (ascend_core.kv_routing).
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.doctor.plan.config import build_deployment, config_plan_items
from adapters.doctor.plan.model import Target, read_model
from adapters.doctor.report import Report, Section
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment import ModelFacts
from ascend_core.errors import AscendError
from ascend_core.kv_routing import router_command_line
from ascend_core.kv_transfer import PairSide, check_pair, fault_bounds, transport
from ascend_core.memory_budget import dtype_bytes, kv_bytes_per_token
from ascend_core.preflight import CheckItem, CheckStatus
from ports.environment import Environment
from ports.local_files import LocalFiles
from ports.model_files import ModelFiles


def kv_dtype(args: ServeArgs, model: ModelFacts) -> str:
    """The dtype the KV cache holds: --kv-cache-dtype, else --dtype, else the model's."""
    for name in (args.kv_cache_dtype, args.dtype):
        if name and name != "auto":
            return name
    return str(model.dtype)


def pair_report(
    sides: tuple[ServeArgs, ServeArgs],
    model_files: Callable[[str], ModelFiles],
    env: Environment,
    target: Target,
    host_cpus: int | None = None,
    local_files: LocalFiles | None = None,
) -> Report:
    sections: list[Section] = []
    planned: list[PairSide] = []
    wire: list[CheckItem] = []
    for name, args in zip(("prefill", "decode"), sides, strict=True):
        model = read_model(model_files(args.model), args, env)
        if isinstance(model, list):
            sections.append(Section(f"{name} model", model))
            continue
        deployment = build_deployment(
            args, model, target, env, host_cpus=host_cpus, local_files=local_files
        )
        items, plan = config_plan_items(deployment)
        sections.append(Section(f"{name} plan", items))
        kv = deployment.kv_transfer
        if kv is not None:
            chosen = transport(kv, deployment.device_kind)
            what = (
                f"{kv.role.value} over {kv.connector}, transport {chosen.value if chosen else '?'}"
            )
            bounds = fault_bounds(kv)
            if name == "prefill":
                what += f", bootstrap port {kv.bootstrap_port or 8998}; "
                what += bounds.producer_says()
            else:
                what += f"; {bounds.consumer_says()}"
            wire.append(CheckItem(f"{name} does", CheckStatus.PASS, what))
        dtype = kv_dtype(args, model)
        planned.append(
            PairSide(
                deployment,
                (plan.block_size if plan is not None else None) or args.block_size,
                dtype,
                http_port=args.port,
                host=args.host or "127.0.0.1",
            )
        )
        if name == "prefill":
            try:
                per_token = kv_bytes_per_token(
                    model, dtype_bytes(dtype, model.dtype), args.tp, args.pp
                )
            except AscendError as error:
                wire.append(CheckItem("KV bytes per token", CheckStatus.WARN, error.what))
            else:
                wire.append(
                    CheckItem(
                        "KV bytes per token",
                        CheckStatus.PASS,
                        f"{per_token.bytes} B per token per device sent by the prefill side "
                        f"({per_token.formula})",
                    )
                )
    if len(planned) == 2:
        checks = check_pair(planned[0], planned[1])
        sections.append(
            Section(
                "pair",
                [
                    CheckItem(
                        c.name, CheckStatus.PASS if c.ok else CheckStatus.FAIL, c.detail, c.fix
                    )
                    for c in checks
                ],
            )
        )
    sections.append(Section("transfer", wire))
    if len(planned) == 2 and all(p.deployment.kv_transfer is not None for p in planned):
        sections.append(Section("router", [_router_item(planned[0], planned[1])]))
    return Report("pair", sections, {"prefill": sides[0].model, "decode": sides[1].model})


def _router_item(prefill: PairSide, decode: PairSide) -> CheckItem:
    """The vllm-router line for the pair: without `--kv-connector mooncake` or the prefill's
    bootstrap port after its URL the decode instance computes every prompt itself."""
    return CheckItem(
        "vllm-router",
        CheckStatus.PASS,
        router_command_line(prefill, decode),
        "start the router with exactly these connector options: without `--kv-connector "
        "mooncake` or the bootstrap port after the prefill's URL, the decode instance gets "
        "no transfer parameters and computes every prompt itself; where the router runs on "
        "another host, give each instance's address instead of 127.0.0.1",
    )

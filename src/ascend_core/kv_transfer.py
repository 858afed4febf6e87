"""KV connectors for prefill/decode disaggregation: which names serve, on which transport,
and whether a prefill and a decode instance agree before either loads a weight."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from ascend_core.deployment import Deployment, KvTransferRole, KvTransferSettings, PluginModule
from ascend_core.errors import ConfigError
from ports.device import DeviceKind

# vLLM's own connector; the reference plugin's name for its Mooncake connector, which this
# plugin registers (adapters/vllm/kv_transfer/connector.py) over vLLM's.
MOONCAKE = "MooncakeConnector"
MOONCAKE_V1 = "MooncakeConnectorV1"

# What kv_connector_module_path is set to for MooncakeConnectorV1 (vLLM's connector
# factory imports the module it names and takes the class of the connector's name).
MOONCAKE_V1_MODULE = PluginModule.MOONCAKE_V1
# The Mooncake producer's bootstrap port when VLLM_MOONCAKE_BOOTSTRAP_PORT is unset (vLLM).
DEFAULT_BOOTSTRAP_PORT = 8998


# Faults. A producer holds a finished request's KV blocks for the consumer's pull this long
# (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT, vLLM's default), then frees them; vLLM's consumer
# waits for a prefill side's answer that long plus a margin before it gives the pull up.
HOLD_VARIABLE = "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"
DEFAULT_HOLD_SECONDS = 480
VLLM_PULL_MARGIN_SECONDS = 60
# This plugin's kv_connector_extra_config key: the consumer's deadline, in seconds, for an
# answer from the prefill side to a pull (the reference has no such key; its
# ASCEND_TRANSFER_TIMEOUT is the Ascend transport's own per-write timeout).
PULL_TIMEOUT_KEY = "pull_timeout_s"


class Transport(enum.Enum):
    """The Mooncake transfer engine's protocol (its `mooncake_protocol`)."""

    TCP = "tcp"  # any host: mooncake-transfer-engine-non-cuda, the `pd` extra
    RDMA = "rdma"  # RDMA NICs (vLLM's default)
    ASCEND = "ascend"  # Ascend's direct transport over HCCS/RoCE: mooncake-transfer-engine-npu


@frozen
class Connector:
    """One connector name this plugin serves, and what it means here."""

    name: str
    what: str
    # The kv_connector_extra_config keys it reads; any other key is named in a warning.
    keys: frozenset[str]


CONNECTORS: Mapping[str, Connector] = {
    MOONCAKE: Connector(
        MOONCAKE,
        "vLLM's MooncakeConnector: the decode side pulls the prompt's KV blocks from the "
        "prefill side over the Mooncake transfer engine",
        frozenset(
            {
                "mooncake_protocol",
                "device_name",
                "num_workers",
                "bootstrap_server_address",
                PULL_TIMEOUT_KEY,
            }
        ),
    ),
    MOONCAKE_V1: Connector(
        MOONCAKE_V1,
        "the reference plugin's name: vLLM's MooncakeConnector with the reference's "
        "kv_connector_extra_config keys (prefill/decode sizes, use_ascend_direct) and the "
        "device's transport by default",
        frozenset(
            {
                "prefill",
                "decode",
                "use_ascend_direct",
                "use_layerwise",
                "mooncake_protocol",
                "device_name",
                "num_workers",
                PULL_TIMEOUT_KEY,
            }
        ),
    ),
}

# The failure policies vLLM 0.33 accepts (KVTransferConfig.kv_load_failure_policy).
LOAD_FAILURE_POLICIES = ("fail", "recompute")


def settings_from(raw: Mapping[str, Any]) -> KvTransferSettings:
    """KvTransferSettings from kv_transfer_config's fields (vLLM's names); the bootstrap
    port comes from the environment (deployment_builder).

    Raises ConfigError for a kv_role vLLM would not know."""
    role = raw.get("kv_role")
    try:
        kv_role = KvTransferRole(role)
    except ValueError:
        roles = ", ".join(r.value for r in KvTransferRole)
        raise ConfigError(
            f"kv_transfer_config.kv_role={role!r} is not one of {roles}.",
            "Use kv_producer on the prefill instance and kv_consumer on the decode one.",
        ) from None
    return KvTransferSettings(
        connector=str(raw.get("kv_connector") or ""),
        role=kv_role,
        extra=dict(raw.get("kv_connector_extra_config") or {}),
        module_path=raw.get("kv_connector_module_path") or None,
        kv_port=_as_int(raw.get("kv_port")),
        load_failure_policy=str(raw.get("kv_load_failure_policy") or "fail"),
    )


@frozen
class FaultBounds:
    """What one instance does when its peer fails, and by when.

    The producer frees a finished request's blocks `hold_s` after it finished when no pull
    came, and starts no write for it later than that. The consumer gives a pull up when the
    producer has not answered for `pull_timeout_s` (a dead or stalled prefill instance),
    then `policy` decides: recompute the prompt locally, or end the request with an error.
    """

    policy: str
    hold_s: int
    pull_timeout_s: float
    pull_timeout_set: bool  # kv_connector_extra_config.pull_timeout_s was given

    def consumer_says(self) -> str:
        outcome = (
            "the decode side computes the prompt itself"
            if self.policy == "recompute"
            else "the request ends with an error"
        )
        source = (
            f"kv_connector_extra_config.{PULL_TIMEOUT_KEY}"
            if self.pull_timeout_set
            else f"vLLM's {HOLD_VARIABLE} + {VLLM_PULL_MARGIN_SECONDS} s"
        )
        return (
            f"a pull the prefill side leaves unanswered for {self.pull_timeout_s:g} s "
            f"({source}) ends as kv_load_failure_policy={self.policy} says: {outcome}"
        )

    def producer_says(self) -> str:
        return (
            f"holds a finished request's KV blocks {self.hold_s} s ({HOLD_VARIABLE}) for "
            "the decode side's pull, then frees them and writes nothing more for it"
        )


def fault_bounds(kv: KvTransferSettings) -> FaultBounds:
    """The bounds this instance runs with (an invalid pull_timeout_s counts as unset;
    instance_problems refuses it)."""
    hold = kv.abort_timeout if kv.abort_timeout is not None else DEFAULT_HOLD_SECONDS
    given = _pull_timeout(kv.extra.get(PULL_TIMEOUT_KEY))
    return FaultBounds(
        policy=kv.load_failure_policy,
        hold_s=hold,
        pull_timeout_s=given if given is not None else float(hold + VLLM_PULL_MARGIN_SECONDS),
        pull_timeout_set=given is not None,
    )


def _pull_timeout(raw: Any) -> float | None:
    if raw is None or isinstance(raw, bool):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def known_names() -> str:
    return ", ".join(sorted(CONNECTORS))


def transport(kv: KvTransferSettings, device: DeviceKind) -> Transport | None:
    """The transport this instance's connector will use; None when the value is unknown.

    MooncakeConnectorV1 defaults to the device's own (TCP on the host, Ascend's on an NPU)
    and `use_ascend_direct: true` asks for Ascend's; vLLM's MooncakeConnector defaults to
    RDMA, as vLLM does.
    """
    raw = kv.extra.get("mooncake_protocol")
    if raw is None and kv.connector == MOONCAKE_V1:
        if kv.extra.get("use_ascend_direct") is True or device is DeviceKind.NPU:
            return Transport.ASCEND
        return Transport.TCP
    try:
        return Transport(str(raw or Transport.RDMA.value).lower())
    except ValueError:
        return None


def _own_sizes_key(role: KvTransferRole) -> str | None:
    return {KvTransferRole.PRODUCER: "prefill", KvTransferRole.CONSUMER: "decode"}.get(role)


def instance_problems(deployment: Deployment) -> tuple[tuple[str, str, bool], ...]:
    """(what, fix, is_error) for this instance's kv_transfer_config alone."""
    kv = deployment.kv_transfer
    if kv is None:
        return ()
    shown = f"kv_transfer_config.kv_connector={kv.connector!r}"
    connector = CONNECTORS.get(kv.connector)
    if connector is None:
        return (
            (
                f"{shown} is not a connector this plugin serves (known: {known_names()}).",
                f"Use {MOONCAKE} (vLLM's) or {MOONCAKE_V1} (the reference's name).",
                True,
            ),
        )
    problems: list[tuple[str, str, bool]] = []
    model = deployment.model
    if model.use_sparse or model.compressed_attention:
        # MLA's latent planes transfer (adapters/vllm/kv_transfer/layout.py); the indexer's key
        # cache has its own layout, which no P/D run here has checked.
        problems.append(
            (
                f"{shown} on {model.architecture}, whose indexer keeps its keys in a cache "
                "of its own: only the MLA latent cache's transfer is proven here, not the "
                "indexer's.",
                "Serve sparse-MLA (DSA) models without prefill/decode disaggregation for "
                "now (dense GQA and MLA models transfer).",
                True,
            )
        )
    if kv.module_path and kv.module_path != MOONCAKE_V1_MODULE:
        problems.append(
            (
                f"kv_transfer_config.kv_connector_module_path={kv.module_path!r}: "
                f"{kv.connector} is registered by this plugin; the module path would load "
                "another implementation (the reference's needs its own package).",
                "Remove kv_connector_module_path.",
                True,
            )
        )
    if kv.load_failure_policy not in LOAD_FAILURE_POLICIES:
        problems.append(
            (
                f"kv_transfer_config.kv_load_failure_policy={kv.load_failure_policy!r} "
                f"is not one of {', '.join(LOAD_FAILURE_POLICIES)}.",
                "Use fail (the request ends with an error) or recompute.",
                True,
            )
        )
    chosen = transport(kv, deployment.device_kind)
    raw = kv.extra.get("mooncake_protocol")
    if chosen is None:
        problems.append(
            (
                f"kv_connector_extra_config.mooncake_protocol={raw!r} is not a transport "
                f"this plugin knows ({', '.join(t.value for t in Transport)}).",
                "Use tcp on the host, ascend on Ascend NPUs, rdma with RDMA NICs.",
                True,
            )
        )
    elif deployment.device_kind is DeviceKind.CPU and chosen is Transport.ASCEND:
        problems.append(
            (
                f"{shown} asks for Ascend's transport (use_ascend_direct or "
                "mooncake_protocol=ascend) on the host device, which has no NPU.",
                'Set "mooncake_protocol": "tcp" in kv_connector_extra_config.',
                True,
            )
        )
    elif deployment.device_kind is DeviceKind.CPU and chosen is Transport.RDMA and raw is None:
        problems.append(
            (
                f"{shown} without kv_connector_extra_config.mooncake_protocol means RDMA "
                "(vLLM's default), which needs RDMA NICs; the host's transport is TCP.",
                'Add "mooncake_protocol": "tcp" to kv_connector_extra_config.',
                True,
            )
        )
    raw_timeout = kv.extra.get(PULL_TIMEOUT_KEY)
    if raw_timeout is not None and _pull_timeout(raw_timeout) is None:
        problems.append(
            (
                f"kv_connector_extra_config.{PULL_TIMEOUT_KEY}={raw_timeout!r} is not a "
                "positive number of seconds.",
                f"Give the seconds the decode side waits for the prefill side's answer to a "
                f"pull (more than the prefill's {HOLD_VARIABLE}), or remove the key.",
                True,
            )
        )
    if kv.extra.get("use_layerwise") is True:
        problems.append(
            (
                f"{shown} with use_layerwise: the layer-by-layer push connector of the "
                "reference is not served here; KV moves once the prefill has finished.",
                "Remove use_layerwise (or set it to false).",
                True,
            )
        )
    unknown = sorted(set(kv.extra) - connector.keys)
    if unknown:
        accepted = ", ".join(sorted(connector.keys))
        problems.append(
            (
                f"kv_connector_extra_config keys {', '.join(unknown)} mean nothing to "
                f"{kv.connector} here and are ignored (known: {accepted}).",
                "Remove them, or check the spelling.",
                False,
            )
        )
    own = _own_sizes_key(kv.role)
    sizes = kv.extra.get(own) if own else None
    if isinstance(sizes, Mapping):
        p = deployment.parallel
        for key, actual in (("tp_size", p.tp), ("dp_size", p.dp)):
            given = sizes.get(key)
            if given is not None and _as_int(given) != actual:
                problems.append(
                    (
                        f"kv_connector_extra_config.{own}.{key}={given!r} on this "
                        f"{kv.role.value} instance, which runs {key.split('_')[0]}={actual}.",
                        f"Set {own}.{key} to {actual}, or the parallel size to {given}.",
                        True,
                    )
                )
    return tuple(problems)


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@frozen
class PairSide:
    """One instance of a prefill/decode pair as the plan will run it."""

    deployment: Deployment
    block_size: int | None  # the planned block size (None: vLLM's default)
    kv_cache_dtype: str
    http_port: int | None = None
    host: str = "127.0.0.1"


@frozen
class PairCheck:
    """One thing a P/D pair must agree on: its name, whether it holds, and the detail."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def check_pair(prefill: PairSide, decode: PairSide) -> tuple[PairCheck, ...]:
    """What both sides must agree on before load: roles, connector, transport, ports,
    model, block size and KV dtype. Each check says what it found."""
    p_kv, d_kv = prefill.deployment.kv_transfer, decode.deployment.kv_transfer
    checks = [_roles(p_kv, d_kv)]
    if p_kv is None or d_kv is None:
        return tuple(checks)
    checks.append(_connectors(p_kv, d_kv))
    checks.append(_transports(prefill, decode))
    checks.append(_ports(prefill, decode))
    checks.append(_models(prefill.deployment, decode.deployment))
    checks.append(
        _same(
            "block size",
            prefill.block_size,
            decode.block_size,
            "the decode side reads the prefill side's blocks by index and length",
            "Give both instances the same --block-size.",
        )
    )
    checks.append(
        _same(
            "KV cache dtype",
            prefill.kv_cache_dtype,
            decode.kv_cache_dtype,
            "the bytes go over the wire as they are cached",
            "Give both instances the same --kv-cache-dtype (and --dtype).",
        )
    )
    checks.append(_sizes(prefill.deployment, decode.deployment))
    checks.append(_fault_bounds(p_kv, d_kv))
    return tuple(checks)


def _roles(p: KvTransferSettings | None, d: KvTransferSettings | None) -> PairCheck:
    p_ok = p is not None and p.role in (KvTransferRole.PRODUCER, KvTransferRole.BOTH)
    d_ok = d is not None and d.role in (KvTransferRole.CONSUMER, KvTransferRole.BOTH)
    shown = f"prefill kv_role={p.role.value if p else None}, decode {d.role.value if d else None}"
    return PairCheck(
        "roles",
        p_ok and d_ok,
        shown,
        "" if p_ok and d_ok else "The prefill instance is kv_producer, the decode kv_consumer.",
    )


def _connectors(p: KvTransferSettings, d: KvTransferSettings) -> PairCheck:
    # Both names run vLLM's MooncakeConnector underneath, so they speak the same protocol.
    known = p.connector in CONNECTORS and d.connector in CONNECTORS
    return PairCheck(
        "connector",
        known,
        f"prefill {p.connector}, decode {d.connector}"
        + ("" if known else f" (known: {known_names()})"),
        "" if known else f"Use {MOONCAKE} or {MOONCAKE_V1} on both.",
    )


def _transports(prefill: PairSide, decode: PairSide) -> PairCheck:
    p_kv, d_kv = prefill.deployment.kv_transfer, decode.deployment.kv_transfer
    assert p_kv is not None and d_kv is not None
    p_t = transport(p_kv, prefill.deployment.device_kind)
    d_t = transport(d_kv, decode.deployment.device_kind)
    ok = p_t is not None and p_t is d_t
    return PairCheck(
        "transport",
        ok,
        f"prefill {p_t.value if p_t else '?'}, decode {d_t.value if d_t else '?'}",
        "" if ok else "Give both the same kv_connector_extra_config.mooncake_protocol.",
    )


def _ports(prefill: PairSide, decode: PairSide) -> PairCheck:
    p_kv = prefill.deployment.kv_transfer
    assert p_kv is not None
    bootstrap = p_kv.bootstrap_port or DEFAULT_BOOTSTRAP_PORT
    clashes = []
    same_host = prefill.host == decode.host
    if bootstrap in (prefill.http_port, decode.http_port if same_host else None):
        clashes.append(f"the prefill's Mooncake bootstrap port {bootstrap} is an HTTP port")
    if same_host and prefill.http_port is not None and prefill.http_port == decode.http_port:
        clashes.append(f"both serve HTTP on port {prefill.http_port}")
    return PairCheck(
        "ports",
        not clashes,
        "; ".join(clashes)
        or f"prefill bootstrap {bootstrap} (VLLM_MOONCAKE_BOOTSTRAP_PORT), HTTP "
        f"{prefill.http_port} and {decode.http_port}",
        "Give each instance its own --port and the prefill a free "
        "VLLM_MOONCAKE_BOOTSTRAP_PORT; the router's --prefill URL takes that port."
        if clashes
        else "",
    )


def _models(p: Deployment, d: Deployment) -> PairCheck:
    pm, dm = p.model, d.model
    same = (
        pm.architecture == dm.architecture
        and pm.num_layers == dm.num_layers
        and pm.num_kv_heads == dm.num_kv_heads
        and pm.head_size == dm.head_size
        and pm.mla == dm.mla
    )
    layout = "MLA latent" if pm.mla is not None else f"{pm.num_kv_heads} KV heads"
    return PairCheck(
        "model",
        same,
        f"{pm.architecture}, {pm.num_layers} layers, {layout}"
        + ("" if same else f" against {dm.architecture}, {dm.num_layers} layers"),
        "" if same else "Serve the same model on both sides.",
    )


def _same(name: str, p: object, d: object, why: str, fix: str) -> PairCheck:
    ok = p == d
    return PairCheck(
        name, ok, f"prefill {p}, decode {d}" + ("" if ok else f": {why}"), "" if ok else fix
    )


def _sizes(p: Deployment, d: Deployment) -> PairCheck:
    """MooncakeConnectorV1's prefill/decode sizes, as either side states them, against the
    sizes each side runs (vLLM's connector learns the peer's TP in its handshake)."""
    actual = {"prefill": p.parallel, "decode": d.parallel}
    wrong = []
    for side in (p, d):
        kv = side.kv_transfer
        if kv is None or kv.connector != MOONCAKE_V1:
            continue
        for which in ("prefill", "decode"):
            sizes = kv.extra.get(which)
            if not isinstance(sizes, Mapping):
                continue
            for key, value in (("tp_size", actual[which].tp), ("dp_size", actual[which].dp)):
                given = sizes.get(key)
                if given is not None and _as_int(given) != value:
                    wrong.append(f"{kv.role.value} says {which}.{key}={given}, it runs {value}")
    return PairCheck(
        "parallel sizes",
        not wrong,
        "; ".join(wrong)
        or f"prefill tp={p.parallel.tp} dp={p.parallel.dp}, decode tp={d.parallel.tp} "
        f"dp={d.parallel.dp}",
        "Make kv_connector_extra_config's prefill/decode sizes those the instances run."
        if wrong
        else "",
    )


def _fault_bounds(p: KvTransferSettings, d: KvTransferSettings) -> PairCheck:
    """The decode side must give a pull up only after the prefill side stopped writing for
    it (its hold): else late KV could land in blocks the decode side has reused."""
    held, waits = fault_bounds(p), fault_bounds(d)
    ok = waits.pull_timeout_s > held.hold_s
    detail = f"prefill {held.producer_says()}; decode: {waits.consumer_says()}"
    if not ok:
        detail += (
            f"; the decode side would give a pull up ({waits.pull_timeout_s:g} s) while the "
            f"prefill side may still write its KV (for {held.hold_s} s)"
        )
    return PairCheck(
        "fault bounds",
        ok,
        detail,
        ""
        if ok
        else f"Set the decode's kv_connector_extra_config.{PULL_TIMEOUT_KEY} above the "
        f"prefill's {HOLD_VARIABLE} (or lower that).",
    )

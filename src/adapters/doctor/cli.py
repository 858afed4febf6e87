"""The `ascend-doctor` console command: `check` and `plan -- <vllm serve args>`.

Exit status: 0 all good, 1 warnings only, 2 failures.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from adapters.container import Container, container
from adapters.doctor.checking import check_report, probe_safely
from adapters.doctor.pair import pair_report
from adapters.doctor.plan.ray import RAY_ADDRESS_VARIABLE
from adapters.doctor.plan_command import RooflineAsk, choose_target, plan_report
from adapters.doctor.render_json import render_json
from adapters.doctor.render_text import render_text, use_colour
from adapters.doctor.report import EXIT_CODES, Report
from adapters.doctor.serve_args import ServeArgs
from ascend_core.device_selection import DeviceRequest
from ascend_core.errors import AscendError
from ascend_core.memory_budget import GIB
from ascend_core.preflight import CheckStatus
from ports.device import ChipFamily
from ports.runtime import MemoryInfo


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ascend-doctor",
        description="Preflight for vLLM on Ascend: check the host, or explain the plan for "
        "a `vllm serve` command before any weight is loaded. Exit status: 0 all good, "
        "1 warnings only, 2 failures.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="versions, CANN, devices, variables, network")
    check.add_argument("--json", action="store_true", help="print JSON for tools")
    nodes = check.add_mutually_exclusive_group()
    nodes.add_argument(
        "--multi-node",
        dest="multi_node",
        action="store_const",
        const=True,
        help="check the multi-node network variables even if none is set",
    )
    nodes.add_argument("--single-node", dest="multi_node", action="store_const", const=False)
    plan = sub.add_parser(
        "plan",
        help="what the plugin will do with `vllm serve` arguments",
        usage="ascend-doctor plan [--json] [--chip CHIP] [--device-memory GIB] "
        "[--context TOKENS] -- <vllm serve args>",
    )
    plan.add_argument("--json", action="store_true", help="print JSON for tools")
    plan.add_argument(
        "--chip",
        choices=[c.value for c in ChipFamily if c is not ChipFamily.HOST],
        help="plan for this chip family (default: the probed NPU, else A2); with a chip "
        "given or probed, the plan shows the chip's roofline: decode and prefill tokens per "
        "second at most, and what binds them",
    )
    plan.add_argument(
        "--context",
        type=int,
        metavar="TOKENS",
        help="tokens of context each sequence holds in the roofline's decode bound "
        "(default: max_model_len, at most 4096)",
    )
    plan.add_argument(
        "--device-memory",
        type=float,
        metavar="GIB",
        help="memory per device in GiB (default: probed, else the chip's nominal memory)",
    )
    plan.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="with --distributed-executor-backend ray: check that the Ray cluster there "
        "can place the workers (default: RAY_ADDRESS, if set)",
    )
    pair = sub.add_parser(
        "pair",
        help="a prefill and a decode `vllm serve` checked together (P/D disaggregation)",
        usage="ascend-doctor pair [--json] -- <prefill vllm serve args> -- <decode args>",
    )
    pair.add_argument("--json", action="store_true", help="print JSON for tools")
    return parser


def main(
    argv: Sequence[str] | None = None,
    root: Container | None = None,
    stdout: TextIO | None = None,
) -> int:
    """Run one command; returns (and, as a console script, exits with) its status.

    root: where the ports come from (the process's container by default; tests pass one
    with providers overridden).
    """
    c = root if root is not None else container()
    out = stdout or sys.stdout
    args_in = list(sys.argv[1:] if argv is None else argv)
    doctor_argv, serve_argv = _split(args_in)
    parser = build_parser()
    options, extras = parser.parse_known_args(doctor_argv)
    if extras and options.command == "plan" and not serve_argv:
        print(
            "ascend-doctor plan: the vllm serve arguments go after `--`: "
            f"ascend-doctor plan -- {' '.join(extras)}",
            file=sys.stderr,
        )
        return EXIT_CODES[CheckStatus.FAIL]
    if extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    env = c.environment()
    if options.command == "pair":
        report = _pair(c, serve_argv)
        if report is None:
            return EXIT_CODES[CheckStatus.FAIL]
    elif options.command == "check":
        probe = probe_safely(c.npu_probe)
        report = check_report(
            env,
            c.upstream(),
            probe,
            c.host_facts(),
            options.multi_node,
            c.system_libraries(),
        )
    else:
        if not serve_argv:
            print("ascend-doctor plan: give the vllm serve arguments after --", file=sys.stderr)
            return EXIT_CODES[CheckStatus.FAIL]
        try:
            serve = ServeArgs.from_parsed(c.serve_args_parser()(serve_argv))
        except AscendError as error:
            print(f"ascend-doctor plan: {error}", file=sys.stderr)
            return EXIT_CODES[CheckStatus.FAIL]
        chip = ChipFamily(options.chip) if options.chip else None
        memory = int(options.device_memory * GIB) if options.device_memory else None
        target = choose_target(
            probe_safely(c.npu_probe), c.env_settings().device, chip, memory, _host_memory(c)
        )
        draft = serve.speculative.get("model")
        # The bound is for a chip someone named or that is here, never the default A2.
        asked = options.chip is not None or target.device_count is not None
        roofline = RooflineAsk(options.context) if asked else None
        report = plan_report(
            serve,
            c.model_files(serve.model),
            env,
            c.upstream(),
            target,
            c.host_cpus(),
            c.local_files(),
            c.model_files(str(draft)) if draft else None,
            c.ray_cluster() if serve.distributed_executor_backend == "ray" else None,
            options.ray_address or env.get(RAY_ADDRESS_VARIABLE),
            roofline,
        )
    print(_render(report, options.json, out), file=out)
    return report.exit_code


def _pair(c: Container, argv: list[str]) -> Report | None:
    """`pair -- <prefill args> -- <decode args>`; None (with the usage said) when malformed."""
    if "--" not in argv:
        print(
            "ascend-doctor pair: give both instances' vllm serve arguments: "
            "ascend-doctor pair -- <prefill args> -- <decode args>",
            file=sys.stderr,
        )
        return None
    cut = argv.index("--")
    try:
        parse = c.serve_args_parser()
        sides = (
            ServeArgs.from_parsed(parse(argv[:cut])),
            ServeArgs.from_parsed(parse(argv[cut + 1 :])),
        )
    except AscendError as error:
        print(f"ascend-doctor pair: {error}", file=sys.stderr)
        return None
    target = choose_target(
        probe_safely(c.npu_probe), c.env_settings().device, None, None, _host_memory(c)
    )
    return pair_report(
        sides, c.model_files, c.environment(), target, c.host_cpus(), c.local_files()
    )


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """The doctor's own options, and the `vllm serve` arguments after the first `--`."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def _render(report: Report, as_json: bool, out: TextIO) -> str:
    if as_json:
        return render_json(report)
    is_tty = bool(getattr(out, "isatty", lambda: False)())
    return render_text(report, colour=use_colour(is_tty, os.environ))


def _host_memory(c: Container) -> MemoryInfo | None:
    """The host's memory through the runtime port, the numbers the worker will read;
    None unless the host device serves (the runtime port is the serving device's)."""
    if c.env_settings().device is not DeviceRequest.CPU:
        return None
    try:
        memory: MemoryInfo = c.runtime().memory_info()
    except (ImportError, OSError, RuntimeError):
        return None
    return memory


if __name__ == "__main__":
    sys.exit(main())

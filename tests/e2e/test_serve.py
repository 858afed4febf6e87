"""`vllm serve` through the plugin on the host device, driven as a user would (openai client).

One server for the module on 127.0.0.1: health and models, completions and chat (plain and
streaming), 32 concurrent requests answered as when sent alone, bad requests get 4xx while
the server keeps serving, /start_profile and /stop_profile write a torch trace (the server
runs with --profiler-config), and SIGTERM stops it with no traceback, ending in one line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support.hf_reference import local_model

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

_REPO = Path(__file__).resolve().parents[2]
_VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_args(device: str, eager: bool = True, extra: Sequence[str] = ()) -> list[str]:
    """The `vllm serve` arguments after the model (host and port apart)."""
    # The NPU attention op takes fp16/bf16 only, and paged prefill 128-token blocks.
    dtype, block = ("float32", []) if device == "cpu" else ("bfloat16", ["--block-size", "128"])
    return [
        "--dtype",
        dtype,
        *block,
        *(["--enforce-eager"] if eager else []),
        "--max-model-len",
        "1024",
        "--kv-cache-memory-bytes",
        str(256 << 20),
        "--max-num-seqs",
        "32",
        *extra,
    ]


class Server:
    """`vllm serve` of `model_dir`; `device` "npu" runs it under scripts/emulated_npu.py.

    `eager` adds --enforce-eager; `extra` are more `vllm serve` arguments, `extra_env` more
    environment. `args` keeps the arguments after the model (the doctor is asked about the
    same ones)."""

    def __init__(
        self,
        model_dir: str,
        log_path: Path,
        device: str = "cpu",
        eager: bool = True,
        extra: Sequence[str] = (),
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.model = model_dir
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {**os.environ, "VLLM_ASCEND_DEVICE": device, **(extra_env or {})}
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the real layout: engine subprocess
        self.stop_seconds: float | None = None
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        prefix: list[str] = []
        if device == "npu":
            prefix = [sys.executable, str(_REPO / "scripts" / "emulated_npu.py"), "--"]
        self.args = serve_args(device, eager, extra)
        self.proc = subprocess.Popen(
            [
                *prefix,
                str(_VENV_BIN / "vllm"),
                "serve",
                model_dir,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *self.args,
                "--shutdown-timeout",
                "10",
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=_REPO,
        )

    def wait_ready(self, timeout: float = 900) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_path.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise TimeoutError(f"server not ready:\n{self.log_path.read_text()[-4000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            start = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.stop_seconds = time.monotonic() - start
        self.log.close()
        return int(self.proc.returncode)


def running_server(
    tmp_path_factory: pytest.TempPathFactory,
    device: str,
    eager: bool = True,
    extra: Sequence[str] = (),
) -> Iterator[Server]:
    """A ready server of the tiny Llama-style model on `device`, stopped afterwards."""
    model_dir = str(local_model("llama", "tiny"))
    log = tmp_path_factory.mktemp("log") / f"serve-{device}.log"
    srv = Server(model_dir, log, device, eager, extra)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("profiles")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, profile_dir: Path) -> Iterator[Server]:
    # Profiling is configured (it records only between /start_profile and /stop_profile).
    profiler = {
        "profiler": "torch",
        "torch_profiler_dir": str(profile_dir),
        "torch_profiler_use_gzip": False,
        "torch_profiler_with_stack": False,
        "ignore_frontend": True,
    }
    extra = ["--profiler-config", json.dumps(profiler)]
    yield from running_server(tmp_path_factory, "cpu", extra=extra)


@pytest.fixture(scope="module")
def client(server: Server):  # type: ignore[no-untyped-def]
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def _complete(client, model: str, prompt: str, n: int = 12) -> str:  # type: ignore[no-untyped-def]
    r = client.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0)
    return str(r.choices[0].text)


def test_health_and_models(server: Server, client) -> None:  # type: ignore[no-untyped-def]
    import httpx

    assert httpx.get(f"{server.url}/health").status_code == 200
    assert [m.id for m in client.models.list().data] == [server.model]


def test_completion_and_its_stream_agree(server: Server, client) -> None:  # type: ignore[no-untyped-def]
    text = _complete(client, server.model, "The plugin serves")
    assert text
    stream = client.completions.create(
        model=server.model, prompt="The plugin serves", max_tokens=12, temperature=0, stream=True
    )
    pieces = [c.choices[0].text for c in stream if c.choices]
    assert len(pieces) > 1 and "".join(pieces) == text


def test_chat_plain_and_streaming(server: Server, client) -> None:  # type: ignore[no-untyped-def]
    messages = [{"role": "user", "content": "Say something about ports."}]
    r = client.chat.completions.create(
        model=server.model, messages=messages, max_tokens=10, temperature=0
    )
    content = r.choices[0].message.content
    assert r.usage.completion_tokens == 10 and content
    stream = client.chat.completions.create(
        model=server.model, messages=messages, max_tokens=10, temperature=0, stream=True
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert streamed == content


def test_32_concurrent_requests_match_sequential(server: Server, client) -> None:  # type: ignore[no-untyped-def]
    prompts = [f"Request {i}: the adapter " + "word " * (i % 7) for i in range(32)]
    alone = [_complete(client, server.model, p) for p in prompts]
    with ThreadPoolExecutor(32) as pool:
        together = list(pool.map(lambda p: _complete(client, server.model, p), prompts))
    assert together == alone


def test_bad_requests_get_4xx_and_the_server_keeps_serving(server: Server, client) -> None:  # type: ignore[no-untyped-def]
    import httpx

    bad = [
        b"{not json",
        b'{"model": "%s", "prompt": "x", "max_tokens": -3}' % server.model.encode(),
        b'{"model": "%s", "prompt": "%s", "max_tokens": 4}'
        % (server.model.encode(), b"word " * 5000),  # longer than max_model_len
        b'{"model": "no-such-model", "prompt": "x"}',
    ]
    for body in bad:
        r = httpx.post(
            f"{server.url}/v1/completions",
            content=body,
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        assert 400 <= r.status_code < 500, (body[:60], r.status_code, r.text[:200])
    assert _complete(client, server.model, "Still there?")


# --shutdown-timeout 10 bounds the drain; the engine core's teardown takes a few seconds
# more here (3-6 s measured on 2 busy cores).
_STOP_WITHIN_S = 30
_LOG_PREFIX = re.compile(r"^\(\S+ pid=\d+\) [A-Z]+ \S+ \S+ \[[^\]]+\] ")
_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\S+)')


def _tracebacks(log: str) -> list[tuple[list[tuple[str, str]], str]]:
    """Each traceback in the log: its frames as (file path, function), and the exception line."""
    found: list[tuple[list[tuple[str, str]], str]] = []
    frames: list[tuple[str, str]] | None = None
    for raw in log.splitlines():
        line = _LOG_PREFIX.sub("", raw)
        if line.startswith("Traceback (most recent call last)"):
            frames = []
        elif frames is not None and line.startswith(" "):
            if match := _FRAME.search(line):
                frames.append((match[1], match[2]))
        elif frames is not None:
            found.append((frames, line))
            frames = None
    return found


def _is_vllm_shutdown_race(frames: list[tuple[str, str]], exception: str) -> bool:
    """The EngineDeadError vLLM's own output queue task queues when it is cancelled."""
    return exception.startswith("vllm.v1.engine.exceptions.EngineDeadError") and [
        (Path(path).name, function) for path, function in frames
    ] == [("async_llm.py", "output_handler"), ("core_client.py", "get_output_async")]


def test_start_and_stop_profile_write_a_trace_of_the_requests_between(  # type: ignore[no-untyped-def]
    server: Server, client, profile_dir: Path
) -> None:
    import httpx

    assert httpx.post(f"{server.url}/start_profile", timeout=30).status_code == 200
    _complete(client, server.model, "Profile this", n=3)
    assert httpx.post(f"{server.url}/stop_profile", timeout=60).status_code == 200
    (trace,) = profile_dir.glob("*.pt.trace.json")
    names = {e.get("name", "") for e in json.loads(trace.read_text())["traceEvents"]}
    assert "aten::embedding" in names
    assert any(n.startswith("execute_context_1(") for n in names)


def test_sigterm_stops_the_server(server: Server) -> None:
    # Runs last in this module (pytest keeps file order): stops the shared server.
    code = server.stop()
    log = server.log_path.read_text()
    assert code == 0, log[-3000:]
    assert server.stop_seconds is not None and server.stop_seconds < _STOP_WITHIN_S
    assert "Application shutdown complete" in log
    # The engine core drained, tore down and exited by itself, not on an error.
    assert "[shutdown] EngineCore: request processing complete" in log
    assert "EngineCore encountered a fatal error" not in log
    ours = str(_REPO / "src")
    assert not [line for line in log.splitlines() if 'File "' in line and ours in line]
    # Any traceback left is vLLM's shutdown race (the xfail below), nothing else.
    for frames, exception in _tracebacks(log):
        assert _is_vllm_shutdown_race(frames, exception), (frames, exception)
    # The stop ends in one line, the server's own: no report of Triton's nanobind bindings
    # at exit (~30 lines, before the plugin unfroze vLLM's frozen heap at exit).
    assert "nanobind" not in log, log[-3000:]
    assert log.rstrip().splitlines()[-1].endswith("Application shutdown complete."), log[-3000:]


@pytest.mark.xfail(
    reason="vLLM 0.33 race in API-server code no platform hook runs in (reported upstream "
    "as vllm-project/vllm#48745, fix proposed in #49000): the "
    "API server calls AsyncLLM.shutdown in an executor thread (entrypoints/launchers/"
    "launcher.py:278); it shuts the engine client down first, whose BackgroundResources "
    "cancel the output queue task from that thread (v1/engine/core_client.py:554,560), "
    "which queues an EngineDeadError when cancelled (core_client.py:1263-1264); the "
    "output_handler is cancelled only afterwards (v1/engine/async_llm.py:313 then 317), "
    "so when the loop runs it first it logs 'AsyncLLM output_handler failed.' with the "
    "traceback (async_llm.py:943). Seen after 10 of 19 SIGTERMs here; 3 of 3 with that "
    "cancel delayed 0.5 s, 0 of 3 with the output_handler cancelled first.",
    strict=False,
)
def test_sigterm_leaves_no_traceback(server: Server) -> None:
    server.stop()
    assert "Traceback" not in server.log_path.read_text()

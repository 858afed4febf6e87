"""The composition root: production wiring resolves; tests swap adapters by overriding providers."""

import pytest

from adapters.container import Container
from adapters.cpu.ops import CpuOps
from adapters.cpu.runtime import CpuRuntime
from ascend_core.errors import DeviceUnavailableError
from ports.device import DeviceKind, ProbeResult
from unit.fakes.chip_runtime import FakeChipRuntime
from unit.fakes.environment import FakeEnvironment
from unit.fakes.probe import FakeProbe

ABSENT = ProbeResult(DeviceKind.NPU, False, "libascendcl.so not found", "source set_env.sh")


def make(env: dict[str, str], probe: ProbeResult = ABSENT) -> tuple[Container, FakeProbe]:
    c = Container()
    fake_probe = FakeProbe(probe)
    c.environment.override(FakeEnvironment(env))
    c.npu_probe.override(fake_probe)
    return c, fake_probe


# The port each device-adapter provider must implement.
PORT_OF = {
    "ops": "ports.ops:Ops",
    "quant_ops": "ports.quant:QuantOps",
    "quant_moe_ops": "ports.quant_moe:QuantMoeOps",
    "int4_weight_ops": "ports.quant_w4a16:Int4WeightOps",
    "int4_expert_ops": "ports.quant_w4a16_moe:Int4ExpertOps",
    "w4a8_linear_ops": "ports.quant_w4a8:W4A8LinearOps",
    "weight_quant_ops": "ports.weight_quant:WeightQuantOps",
    "runtime": "ports.runtime:DeviceRuntime",
    "npu_runtime": "ports.runtime:DeviceRuntime",
    "communicator": "ports.collective:Communicator",
    "moe_ops": "ports.moe:MoeOps",
    "moe_comm_ops": "ports.moe_comm:MoeCommOps",
    "mla_ops": "ports.mla:MlaOps",
    "sparse_mla_ops": "ports.sparse_mla:SparseMlaOps",
    "sampling_ops": "ports.sampling:SamplingOps",
    "slot_mapping": "ports.slot_mapping:SlotMapping",
    "host_gemm": "ports.host_gemm:HostGemm",
    "rejection_ops": "ports.rejection:RejectionOps",
    "draft_input_ops": "ports.draft_inputs:DraftInputOps",
    "lora_ops": "ports.lora:LoraOps",
    "linear_attention_ops": "ports.linear_attention:LinearAttentionOps",
    "sleep_memory": "ports.sleep:SleepMemory",
    "profiler": "ports.profiler:DeviceProfiler",
    "upstream": "ports.upstream:Upstream",
    "model_files": "ports.model_files:ModelFiles",
    "local_files": "ports.local_files:LocalFiles",
    "ray_cluster": "ports.cluster:RayCluster",
    "system_libraries": "ports.system_libraries:SystemLibraries",
    # The doctor's providers, the CPU list and the torch_npu loader name functions.
    "host_facts": None,
    "triton_kernel_path": None,
    "serve_args_parser": None,
    "host_cpus": None,
    "torch_npu": None,
}


def _resolve(target: str):  # type: ignore[no-untyped-def]
    import importlib

    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _lazy_targets(provider):  # type: ignore[no-untyped-def]
    """The `module:Class` strings a provider (or each branch of a Selector) builds."""
    from dependency_injector import providers

    if isinstance(provider, providers.Selector):
        return [t for branch in provider.providers.values() for t in _lazy_targets(branch)]
    args = getattr(provider, "args", ())
    return [a for a in args if isinstance(a, str) and ":" in a]


def test_production_wiring_names_classes_that_exist_and_implement_their_port():
    Container().check_dependencies()
    checked = 0
    for name, provider in Container().providers.items():
        for target in _lazy_targets(provider):
            cls = _resolve(target)  # a misspelt module or class fails here
            port = PORT_OF[name]
            if port is None:
                assert callable(cls), (name, target)
            elif isinstance(cls, type):
                assert issubclass(cls, _resolve(port)), (name, target)
            else:  # a factory choosing the adapter (the NPU's Triton kernels): its return type
                import typing

                assert typing.get_type_hints(cls)["return"] is _resolve(port), (name, target)
            checked += 1
    assert checked >= 13  # ops x2, runtime x2 (one shared with npu_runtime), upstream, ...


def test_the_lazy_target_check_catches_a_wrong_name():
    from dependency_injector import providers

    from adapters.container import _lazy

    broken = providers.Singleton(_lazy, "adapters.cpu.ops:NoSuchOps")
    (target,) = _lazy_targets(broken)
    with pytest.raises(AttributeError):
        _resolve(target)


def test_auto_without_npu_declines_and_gives_no_device_adapter():
    c, _ = make({})
    assert c.device_decision().declined
    with pytest.raises(RuntimeError, match=r"libascendcl\.so not found"):
        c.ops()


def test_cpu_request_wires_host_adapters_once_per_container():
    c, probe = make({"VLLM_ASCEND_DEVICE": "cpu"})
    assert isinstance(c.ops(), CpuOps)
    assert isinstance(c.runtime(), CpuRuntime)
    assert c.ops() is c.ops()
    assert c.communicator().backend == "gloo"
    assert probe.calls == 1


def test_the_host_serves_its_sampling_slot_mapping_and_gemm_ports():
    from adapters.cpu.host_gemm import CpuHostGemm
    from adapters.cpu.sampling import CpuSamplingOps
    from adapters.cpu.slot_mapping import CpuSlotMapping

    c, _ = make({"VLLM_ASCEND_DEVICE": "cpu"})
    assert isinstance(c.sampling_ops(), CpuSamplingOps)
    assert isinstance(c.slot_mapping(), CpuSlotMapping)
    assert isinstance(c.host_gemm(), CpuHostGemm)
    assert c.sampling_ops() is c.sampling_ops() and c.host_gemm() is c.host_gemm()


def test_the_npu_serves_sampling_and_slot_mapping_without_loading_torch_npu():
    from dependency_injector import providers

    from adapters.npu.sampling import NpuSamplingOps
    from adapters.npu.slot_mapping import NpuSlotMapping

    def load_torch_npu() -> None:
        raise AssertionError("torch_npu asked for")

    c, _ = make({}, ProbeResult(DeviceKind.NPU, True, "1 device"))
    c.torch_npu.override(providers.Callable(load_torch_npu))
    assert isinstance(c.sampling_ops(), NpuSamplingOps)
    assert isinstance(c.slot_mapping(), NpuSlotMapping)


def test_npu_request_without_npu_fails_with_the_probe_hint():
    c, _ = make({"VLLM_ASCEND_DEVICE": "npu"})
    with pytest.raises(DeviceUnavailableError, match=r"source set_env\.sh"):
        c.device_decision()


def test_npu_found_selects_npu_adapters_with_the_injected_module(mocker):
    present = ProbeResult(DeviceKind.NPU, True, "1 device")
    c, _ = make({}, present)
    fake_torch_npu = mocker.Mock(name="torch_npu")
    c.torch_npu.override(fake_torch_npu)
    assert c.device_decision().kind is DeviceKind.NPU
    c.runtime().set_device(0)
    fake_torch_npu.npu.set_device.assert_called_once_with(0)


def test_probe_and_doctor_share_one_cann_finder_and_device_lister():
    c = Container()
    probe = c.npu_probe
    assert probe.kwargs["find_library"] is c.cann_library_finder
    assert probe.kwargs["list_devices"] is c.device_lister
    c.cann_library_finder.override(lambda lib: f"/cann/lib64/{lib}")
    c.device_lister.override(lambda: [4, 5, 6])
    facts = c.host_facts()
    assert dict(facts.cann_libraries) == {
        "libascendcl.so": "/cann/lib64/libascendcl.so",
        "libhccl.so": "/cann/lib64/libhccl.so",
    }
    assert facts.device_count == 3


def test_the_finder_and_upstream_read_the_overridden_environment(tmp_path):
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libhccl.so").write_text("")
    c, _ = make({"ASCEND_HOME_PATH": str(tmp_path)})
    assert c.cann_library_finder()("libhccl.so") == str(tmp_path / "lib64" / "libhccl.so")
    assert c.upstream.args[1] is c.environment


def test_model_files_is_a_factory_of_directories(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')
    files = Container().model_files(str(tmp_path))
    assert files.read_json("config.json") == {"hidden_size": 8}


def test_importing_the_container_loads_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, adapters.container\n"
        "c = adapters.container.Container()\n"
        "c.npu_probe(); c.host_facts()\n"
        "print(sorted(m for m in ('torch', 'torch_npu', 'vllm') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("soc", "family"),
    [("Ascend910B2", "A2"), ("Ascend910_9391", "A3"), ("Ascend310P3", "310P")],
)
def test_the_serving_chip_is_read_once_from_the_npu_runtime(soc: str, family: str):
    from ports.device import ChipFamily

    c, _ = make({}, ProbeResult(DeviceKind.NPU, True, "1 device"))
    runtime = FakeChipRuntime(soc)
    c.runtime.override(runtime)
    assert c.serving_chip() is ChipFamily(family)
    assert c.serving_chip() is ChipFamily(family)
    assert runtime.reads == 1


def test_the_host_device_has_the_host_chip_and_reads_no_runtime():
    from ports.device import ChipFamily

    c, _ = make({"VLLM_ASCEND_DEVICE": "cpu"})
    runtime = FakeChipRuntime("unused")
    c.runtime.override(runtime)
    assert c.serving_chip() is ChipFamily.HOST
    assert runtime.reads == 0


def test_an_npu_of_no_served_family_stops_with_its_name():
    c, _ = make({}, ProbeResult(DeviceKind.NPU, True, "1 device"))
    c.runtime.override(FakeChipRuntime("Ascend910A"))
    with pytest.raises(DeviceUnavailableError, match="Ascend910A"):
        c.serving_chip()

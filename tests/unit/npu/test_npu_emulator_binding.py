"""The emulator binds calls as torch_npu 2.14.0 would, and the schema data is sound."""

from __future__ import annotations

import pytest
import torch

from adapters.npu.schemas import load_schemas
from support.torch_npu_emulator import make_torch_npu

USED_OPS = (
    "npu_rms_norm",
    "npu_add_rms_norm",
    "npu_swiglu",
    "npu_rotary_mul",
    "npu_scatter_nd_update_",
    "npu_fused_infer_attention_score",
    "npu_dynamic_quant",
    "npu_quantize",
    "npu_trans_quant_param",
    "npu_quant_matmul",
)


@pytest.fixture
def tnpu():
    return make_torch_npu()


def test_provenance_names_the_wheel_its_hash_date_and_command():
    prov = load_schemas()["provenance"]
    assert prov["wheel"].startswith("torch_npu-2.14.0-")
    assert len(prov["sha256"]) == 64
    assert prov["torch_npu_version"] == "2.14.0"
    assert prov["extracted_on"] and "extract_npu_schemas.py" in prov["command"]


@pytest.mark.parametrize("op", USED_OPS)
def test_stored_arguments_agree_with_torchgen_on_the_stored_schema(op):
    from torchgen.model import FunctionSchema

    for overload in load_schemas()["ops"][op]:
        parsed = FunctionSchema.parse(overload["schema"])
        names = [a.name for a in parsed.arguments.flat_positional]
        names += [a.name for a in parsed.arguments.flat_kwarg_only]
        names += [a.name for a in parsed.arguments.out]
        assert [a["name"] for a in overload["arguments"]] == names


def test_defaults_are_filled_in(tnpu):
    x = torch.randn(2, 8)
    tnpu.npu_rms_norm(x, torch.ones(8))
    assert tnpu.calls_of("npu_rms_norm")[0]["epsilon"] == 1e-6


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t, x: t.npu_rms_norm(x, x[0], eps=1e-6), "unexpected keyword argument 'eps'"),
        (lambda t, x: t.npu_swiglu(x, -1, 0), "takes 2 positional"),
        (lambda t, x: t.npu_swiglu(), "missing required argument 'self'"),
        (lambda t, x: t.npu_swiglu(x, dim=1.5), "argument 'dim' must be int"),
        (lambda t, x: t.npu_swiglu(x, dim=True), "argument 'dim' must be int"),
        (lambda t, x: t.npu_rms_norm(x.tolist(), x[0]), "argument 'self' must be Tensor"),
        (lambda t, x: t.npu_rotary_mul(x, x, x, rotary_mode=1), "must be str"),
        (
            lambda t, x: t.npu_fused_infer_attention_score(x, x, x, None),
            "takes 3 positional",
        ),
        (
            lambda t, x: t.npu_fused_infer_attention_score(x, x, x, actual_seq_lengths=[1.0]),
            "must be SymInt[]?",
        ),
    ],
)
def test_calls_the_schema_refuses_raise_type_error(tnpu, call, message):
    with pytest.raises(TypeError, match=message.replace("[", r"\[").replace("?", r"\?")):
        call(tnpu, torch.randn(2, 8))


def test_unknown_op_is_an_attribute_error_like_the_real_module(tnpu):
    with pytest.raises(AttributeError, match="no attribute 'npu_paged_attention_v9'"):
        getattr(tnpu, "npu_paged_attention_v9")  # noqa: B009 - the attribute access is the test


def test_an_op_of_2_14_0_without_emulated_semantics_says_so(tnpu):
    with pytest.raises(NotImplementedError, match="npu_gemma_rms_norm exists"):
        tnpu.npu_gemma_rms_norm(torch.randn(2, 4), torch.ones(4))


def test_the_out_overload_writes_the_default_overloads_results_into_out(tnpu):
    # The graph capture launches the .out overload (torch_npu's graph handler does).
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 1, 32, generator=g).half()  # BSH decode, 2 heads of 16
    cache = torch.randn(3, 16, 32, generator=g).half()
    table = torch.tensor([[0, 1], [2, 0]], dtype=torch.int32)
    kw = {"num_heads": 2, "input_layout": "BSH", "block_table": table, "block_size": 16}
    ref, _ = tnpu.npu_fused_infer_attention_score(
        q, cache, cache, actual_seq_lengths_kv=[20, 5], **kw
    )
    out, lse = torch.empty_like(q), torch.empty(1)
    got = tnpu.npu_fused_infer_attention_score.out(
        q, cache, cache, actual_seq_lengths_kv=[20, 5], out=[out, lse], **kw
    )
    assert got[0] is out and torch.equal(out, ref)
    assert tnpu.calls[-1][1] == "out"


def test_an_overload_that_does_not_exist_is_an_attribute_error(tnpu):
    with pytest.raises(AttributeError, match="no overload 'inplace'"):
        tnpu.npu_fused_infer_attention_score.inplace  # noqa: B018 - the access is the test


def test_runtime_names_outside_the_wheel_api_do_not_exist(tnpu):
    with pytest.raises(AttributeError):
        getattr(tnpu.npu, "get_gpu_name")  # noqa: B009 - the attribute access is the test
    with pytest.raises(NotImplementedError, match="utilization"):
        tnpu.npu.utilization()


def test_scatter_refuses_out_of_range_indices_the_device_would_not_check(tnpu):
    cache = torch.zeros(2, 4, 1, 2)
    with pytest.raises(ValueError, match="out of range"):
        tnpu.npu_scatter_nd_update_(cache, torch.tensor([[0, -1]]), torch.ones(1, 1, 2))


def test_attention_mask_must_be_the_compressed_causal_one(tnpu):
    q = torch.randn(1, 4, 16, dtype=torch.float16)
    kv = torch.randn(2, 128, 16, dtype=torch.float16)
    wrong = torch.ones(2048, 2048, dtype=torch.bool).tril(diagonal=-1)
    with pytest.raises(ValueError, match="above the diagonal"):
        tnpu.npu_fused_infer_attention_score(
            q,
            kv,
            kv,
            atten_mask=wrong,
            actual_seq_lengths=[4],
            actual_seq_lengths_kv=[4],
            block_table=torch.zeros(1, 1, dtype=torch.int32),
            num_heads=1,
            input_layout="BSH",
            sparse_mode=3,
            block_size=128,
        )


def test_paged_attention_without_kv_lengths_is_refused(tnpu):
    q = torch.randn(1, 1, 16, dtype=torch.float16)
    kv = torch.randn(2, 128, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="actual_seq_lengths_kv"):
        tnpu.npu_fused_infer_attention_score(
            q,
            kv,
            kv,
            block_table=torch.zeros(1, 1, dtype=torch.int32),
            num_heads=1,
            input_layout="BSH",
            block_size=128,
        )


def test_dtype_arguments_typed_int_take_torch_dtypes(tnpu):
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    tnpu.npu_dynamic_quant(x, dst_type=torch.int8)
    assert tnpu.calls_of("npu_dynamic_quant")[0]["dst_type"] is torch.int8
    with pytest.raises(TypeError, match="round_mode"):  # a non-dtype int stays an int
        tnpu.npu_trans_quant_param(torch.ones(4), None, round_mode=torch.int8)

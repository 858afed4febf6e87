"""Files additional_config names, checked through the LocalFiles port."""

from __future__ import annotations

from ascend_core.ascend_config.files import probe_referenced_files, referenced_files
from unit.fakes.local_files import FakeLocalFiles


def test_the_expert_map_is_the_file_to_check():
    raw = {"eplb_config": {"expert_map_path": "/maps/ep.json"}}
    assert referenced_files(raw) == ("/maps/ep.json",)
    assert referenced_files({"eplb_config": {"expert_map_path": None}}) == ()
    assert referenced_files({"eplb_config": "not a mapping"}) == ()
    assert referenced_files(None) == ()


def test_probing_asks_the_port_for_each_named_file():
    """vllm_ascend/ascend_config.py EplbConfig._validate_config checks os.path.exists and
    os.access(R_OK); here the adapter's LocalFiles answers and the plan refuses."""
    files = FakeLocalFiles({"/maps/here.json"})
    assert probe_referenced_files(
        {"eplb_config": {"expert_map_path": "/maps/gone.json"}}, files
    ) == {"/maps/gone.json": False}
    assert probe_referenced_files(
        {"eplb_config": {"expert_map_path": "/maps/here.json"}}, files
    ) == {"/maps/here.json": True}
    assert files.asked == ["/maps/gone.json", "/maps/here.json"]

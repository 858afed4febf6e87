"""The figures of each chip family the roofline divides by, each with where it was published.

Per device as torch_npu counts devices: an A3 (Ascend 910C) package holds two dies and
each die is one device (`npu-smi` and torch_npu list 16 per Atlas 800I A3 server). A
figure Huawei has not published says so in its source and names the assumption made;
a bound is only as good as its figures, so the doctor prints every source it used.
Bandwidths are one direction per device (a link sends and receives at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from attrs import frozen

from ports.device import ChipFamily

TB = 10**12
GB = 10**9


@frozen
class Figure:
    """One number and where it comes from; published False marks an assumption."""

    value: float
    source: str
    published: bool = True


@frozen
class ChipFigures:
    """What bounds a decode step or a prefill on one device of a chip family."""

    family: ChipFamily
    name: str
    hbm_bytes: Figure
    hbm_bytes_per_s: Figure
    cube_bf16_flops: Figure  # dense bf16/fp16 matrix throughput
    cube_int8_ops: Figure  # dense int8 matrix throughput
    scale_up_bytes_per_s: Figure  # HCCS / UB per device, one direction
    scale_up_devices: Figure  # devices one scale-up (HCCS/UB) domain joins
    scale_out_bytes_per_s: Figure  # RoCE per device, one direction

    def figures(self) -> Mapping[str, Figure]:
        """Every figure by its field name, in declaration order."""
        return {
            "hbm_bytes": self.hbm_bytes,
            "hbm_bytes_per_s": self.hbm_bytes_per_s,
            "cube_bf16_flops": self.cube_bf16_flops,
            "cube_int8_ops": self.cube_int8_ops,
            "scale_up_bytes_per_s": self.scale_up_bytes_per_s,
            "scale_up_devices": self.scale_up_devices,
            "scale_out_bytes_per_s": self.scale_out_bytes_per_s,
        }

    def link_bytes_per_s(self, group: int) -> tuple[float, str]:
        """The bandwidth a collective over `group` devices runs at, and which link it is."""
        if group <= self.scale_up_devices.value:
            return self.scale_up_bytes_per_s.value, "HCCS"
        return self.scale_out_bytes_per_s.value, "RoCE"


_GITEE_910B = "ai.gitee.com/docs/compute/clusters_gpu/ascend_gpu (Ascend 910B: 64GB HBM2e)"
_CLOUDMATRIX = (
    "Zuo et al., 'Serving Large Language Models on Huawei CloudMatrix384', arXiv:2506.12708 (2025)"
)
_HC2025 = (
    "Huawei Connect 2025 keynote, 18 Sep 2025 (Ascend 950PR/950DT; reported by "
    "eu.36kr.com/en/p/3472052285429891 and pc.schihei.de/new-paradigms-for-ai-infrastructure)"
)
_DAVINCI_INT8 = (
    "assumption: int8 = 2 x bf16, the Da Vinci cube's 8192 int8 MACs against 4096 fp16 "
    "MACs per cycle (Huawei, Hot Chips 31, 2019: Ascend 910 256 TFLOPS fp16 / 512 TOPS int8)"
)

CHIPS: Mapping[ChipFamily, ChipFigures] = MappingProxyType(
    {
        ChipFamily.A2: ChipFigures(
            ChipFamily.A2,
            "Ascend 910B (Atlas 800I/T A2)",
            Figure(64 * GB, _GITEE_910B),
            Figure(
                1.6 * TB,
                "not published by Huawei; assumption: 4 HBM2e stacks x 400 GB/s = 1.6 TB/s "
                "(third-party figures range 1.2-1.8 TB/s)",
                published=False,
            ),
            Figure(
                320e12,
                "borimooc.com/mNoticeDetail/1187.htm (910B: FP16 320 TFLOPS, INT8 640 TOPS); "
                "ai.gitee.com gives 280 TFLOPS fp16: the higher is kept, as a bound",
            ),
            Figure(640e12, "borimooc.com/mNoticeDetail/1187.htm (910B: INT8 640 TOPS)"),
            Figure(
                196 * GB,
                "not published per link by Huawei; assumption: the same HCCS per die as the "
                "A3 (784 GB/s per two-die 910C package, both directions), 196 GB/s one way; "
                "8 NPUs of a server fully connected (" + _GITEE_910B + ")",
                published=False,
            ),
            Figure(8, "Atlas 800I/T A2: 8 NPUs fully connected by HCCS (" + _GITEE_910B + ")"),
            Figure(
                25 * GB,
                "assumption: one 200GE RoCE port per NPU (25 GB/s one way) between servers",
                published=False,
            ),
        ),
        ChipFamily.A3: ChipFigures(
            ChipFamily.A3,
            "Ascend 910C die (Atlas 800I A3 / CloudMatrix384)",
            Figure(
                64 * GB,
                "128 GB per two-die 910C package (techpowerup.com/335749; " + _CLOUDMATRIX + ")",
            ),
            Figure(
                1.6 * TB,
                "3.2 TB/s per two-die 910C package (techpowerup.com/335749, SemiAnalysis)",
            ),
            Figure(
                376e12, "752 TFLOPS dense bf16/fp16 per two-die 910C package (" + _CLOUDMATRIX + ")"
            ),
            Figure(752e12, _DAVINCI_INT8, published=False),
            Figure(
                196 * GB,
                "UB/HCCS 784 GB/s per 910C package both directions (besthub.dev Ascend roadmap; "
                "196 GB/s per NPU die: chinaresearchcollective.substack.com CloudMatrix 384)",
            ),
            Figure(
                768,
                "CloudMatrix384 / Atlas 900 A3 SuperPoD: 384 packages (768 dies) on one UB "
                "network (" + _CLOUDMATRIX + "); an Atlas 800I A3 server alone joins 16",
            ),
            Figure(
                25 * GB,
                "assumption: 200 Gb/s RoCE per die (25 GB/s one way) beyond the UB domain",
                published=False,
            ),
        ),
        ChipFamily.A5: ChipFigures(
            ChipFamily.A5,
            "Ascend 950PR (HiBL 1.0)",
            Figure(128 * GB, "950PR: HiBL 1.0, 128 GB, 1.6 TB/s (" + _HC2025 + ")"),
            Figure(
                1.6 * TB,
                "950PR: HiBL 1.0, 1.6 TB/s (" + _HC2025 + "); the 950DT (Q4 2026) has HiZQ 2.0, "
                "144 GB, 4 TB/s",
            ),
            Figure(
                500e12,
                "not published; assumption: half the published 1 PFLOPS FP8 (" + _HC2025 + ")",
                published=False,
            ),
            Figure(
                1e15,
                "not published for int8; assumption: the published 1 PFLOPS FP8/HiF8 rate ("
                + _HC2025
                + ")",
                published=False,
            ),
            Figure(
                1 * TB,
                "2 TB/s interconnect per chip (" + _HC2025 + "), taken as both directions: 1 TB/s "
                "one way (assumption)",
                published=False,
            ),
            Figure(
                8192,
                "Atlas 950 SuperPoD: 8192 chips (" + _HC2025 + ")",
            ),
            Figure(
                50 * GB,
                "assumption: 400 Gb/s RoCE per chip (50 GB/s one way) beyond the SuperPoD",
                published=False,
            ),
        ),
    }
)


def chip_figures(family: ChipFamily) -> ChipFigures | None:
    """The figures of a family, None where none are kept (310P, the host)."""
    return CHIPS.get(family)

"""A workload of the built-in transformer block, without profiling it (for tests of assembly alone)."""

from __future__ import annotations

from kforge.workload.extract import Region, Workload
from kforge.workload.prepare import BUILTIN_WORKLOADS

BLOCK = BUILTIN_WORKLOADS / "transformer_block.py"


def block_workload() -> Workload:
    """The regions extraction writes for the block (class style: each module's own class)."""
    rows = [("attn", "AttentionBlock", ["256", "4"], 0.4), ("norm", "Norm", ["256"], 0.05),
            ("up", "GemmBiasGELU", ["256", "512"], 0.15), ("gate", "Matmul", [], 0.15),
            ("gate_norm", "GatedRMSNorm", ["512", "1e-06"], 0.1), ("down", "Matmul", [], 0.15)]
    regions = [Region(name=f"{i}_{p}_{t}", file=f"{i}_{p}_{t}.py", path=p, type=t, style="class", share=s,
                      time_ms=s, calls=1, inputs=[], init_args=a, weights=("", p + "."))
               for i, (p, t, a, s) in enumerate(rows, 1)]
    return Workload(model=str(BLOCK), backend="cpu", device="cpu", size="cpu", total_ms=1.0, regions=regions,
                    coverage=sum(r.share for r in regions))


def own_class(name: str) -> str:
    """A region's kernel written in PyTorch: the block's class ``name`` renamed ModelNew."""
    from kforge.workload.source import closure, rename
    return rename(closure(BLOCK.read_text(), name), {name: "ModelNew"})

"""The ``whole_workload`` table: per workload, model, backend and precision, the newest run that reached assembly."""

from __future__ import annotations

import pandas as pd

from kforge.report.workload import to_markdown, workload_table
from kforge.tracking.schema import WorkloadMetrics as WMetrics


def _run(start, state, solved, eager, compile_=None, workload="block.py", backend="cpu", precision="fp32"):
    return {"run_id": f"r{start}", "status": "FINISHED", "start_time": start, "workload": workload, "model": "oracle",
            "backend": backend, "precision": precision, "state": state, WMetrics.COVERAGE: 0.9, WMetrics.REGIONS: 6, WMetrics.SOLVED: solved,
            WMetrics.REPLACED_SHARE: 0.8, WMetrics.CORRECT: float(state == "correct"), WMetrics.SPEEDUP_EAGER: eager,
            WMetrics.SPEEDUP_COMPILE: compile_, WMetrics.BOUND: 2.5}


def test_newest_assembled_run_per_workload_and_backend():
    runs = pd.DataFrame([_run(1, "numerical_mismatch", 5, 0.9), _run(2, "correct", 6, 1.5, 1.1),
                         _run(3, "interrupted", 2, None),  # newer, but never assembled: not the row
                         _run(4, "correct", 6, 3.0, backend="cuda"),
                         _run(5, "correct", 6, 1.2, backend="cuda", precision="bf16")])  # another arm, not newer
    table = workload_table(runs)
    assert list(zip(table["backend"], table["precision"])) == [("cpu", "fp32"), ("cuda", "bf16"), ("cuda", "fp32")]
    cpu = table.iloc[0]
    assert (cpu["coverage"], cpu["regions_solved"], cpu["verdict"]) == ("90%", "6/6", "correct")
    assert (cpu["speedup_eager"], cpu["speedup_compile"], cpu["bound"]) == ("1.50x", "1.10x", "2.50x")
    assert table.iloc[2]["speedup_compile"] == "-"  # not timed against torch.compile
    md = to_markdown(table)
    assert md.splitlines()[0].startswith("| workload | model | backend | precision | coverage | regions solved |")
    assert "| block.py | oracle | cuda | fp32 | 90% | 6/6 | correct | 3.00x | - | 2.50x |" in md
    assert "| block.py | oracle | cuda | bf16 | 90% | 6/6 | correct | 1.20x | - | 2.50x |" in md


def test_no_runs_no_rows():
    assert workload_table(pd.DataFrame()).empty

"""The ``whole_workload`` table: whole-model jobs' parent runs read back from MLflow (`kforge.tracking.schema`'s
``Workload*`` names), per workload, model, backend and precision (docs/workload.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ..tracking.schema import WORKLOAD_EXPERIMENT, Tags
from ..tracking.schema import WorkloadMetrics as WMetrics
from ..tracking.schema import WorkloadTags as WTags

TABLE = "whole_workload"


def load_workload_runs(client, experiment: str = WORKLOAD_EXPERIMENT) -> pd.DataFrame:
    """Parent runs of whole-model jobs in ``experiment`` (any status), one row each; empty when there are none."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return pd.DataFrame()
    rows = []
    for r in client.search_runs([exp.experiment_id], f"tags.`{WTags.MODEL}` != ''", max_results=50000):
        t, m = r.data.tags, r.data.metrics
        rows.append(dict(run_id=r.info.run_id, status=r.info.status, start_time=r.info.start_time,
                         workload=t.get(WTags.MODEL, ""), model=t.get(Tags.MODEL, ""),
                         backend=t.get(Tags.BACKEND, ""), precision=t.get(Tags.PRECISION) or "fp32",
                         state=t.get(WTags.STATE, ""),
                         **{k: m.get(k) for k in _METRICS}))
    return pd.DataFrame(rows)


_METRICS = (WMetrics.COVERAGE, WMetrics.REGIONS, WMetrics.SOLVED, WMetrics.REPLACED_SHARE, WMetrics.CORRECT,
            WMetrics.SPEEDUP_EAGER, WMetrics.SPEEDUP_COMPILE, WMetrics.BOUND)
#: The table's columns after its keys: (key, heading).
COLUMNS = (("coverage", "coverage"), ("regions_solved", "regions solved"), ("verdict", "whole model"),
           ("speedup_eager", "e2e vs eager"), ("speedup_compile", "e2e vs compile"), ("bound", "Amdahl bound"))
KEYS = ("workload", "model", "backend", "precision")


def _x(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.2f}x"


def workload_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload, model, backend and precision, its newest run that reached assembly: coverage, regions solved, the
    whole model's verdict, end-to-end speedups vs eager and torch.compile, and Amdahl's bound (as text)."""
    if runs.empty:
        return pd.DataFrame(columns=[*KEYS, *(k for k, _ in COLUMNS)])
    done = runs[runs["state"].astype(str).ne("") & runs["state"].ne("interrupted")]
    rows = []
    for _, r in done.sort_values("start_time").groupby(list(KEYS), as_index=False).tail(1).iterrows():
        regions = int(r[WMetrics.REGIONS] or 0)
        rows.append({**{k: r[k] for k in KEYS}, "coverage": f"{(r[WMetrics.COVERAGE] or 0) * 100:.0f}%",
                     "regions_solved": f"{int(r[WMetrics.SOLVED] or 0)}/{regions}", "verdict": r["state"],
                     "speedup_eager": _x(r[WMetrics.SPEEDUP_EAGER]), "speedup_compile": _x(r[WMetrics.SPEEDUP_COMPILE]),
                     "bound": _x(r[WMetrics.BOUND])})
    return pd.DataFrame(rows, columns=[*KEYS, *(k for k, _ in COLUMNS)]).sort_values(list(KEYS)).reset_index(drop=True)


def to_markdown(table: pd.DataFrame) -> str:
    heads = [*KEYS, *(h for _, h in COLUMNS)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
    lines += ["| " + " | ".join(str(r[k]) for k in (*KEYS, *(k for k, _ in COLUMNS))) + " |" for _, r in table.iterrows()]
    return "\n".join(lines) + "\n"


CAPTION = ("whole_workload: per workload, model, backend and precision, the newest job that reached assembly. "
           "coverage: share of the model's operator time (in that precision) in the extracted regions; regions solved: regions with a correct kernel (the "
           "others keep the model's own module); whole model: the assembled model's verdict against the original; "
           "e2e: the assembled model's speedup over the original in PyTorch eager and under torch.compile; Amdahl "
           "bound: 1 / (1 - Σs + Σ s/k) over the solved regions' shares s and their own speedups k.")


def write_workload_table(client, out_dir, experiment: str = WORKLOAD_EXPERIMENT) -> dict[str, dict[str, Any]]:
    """``whole_workload.md`` and ``.csv`` under ``out_dir``, in the shape `kforge.report.render.build_all` returns
    per table ({} when the experiment has no workload runs)."""
    runs = load_workload_runs(client, experiment)
    if runs.empty:
        return {}
    table = workload_table(runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"md": out / f"{TABLE}.md", "csv": out / f"{TABLE}.csv"}
    files["md"].write_text(f"### {TABLE}\n\n{to_markdown(table)}\n{CAPTION}\n")
    table.to_csv(files["csv"], index=False)
    return {TABLE: {"experiment": experiment, "runs": len(runs), "table": table, "files": files}}

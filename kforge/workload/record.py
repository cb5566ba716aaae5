"""What a workload job records on its parent MLflow run, by name, and the ``whole_workload`` table read back.

The job's parent run is the workload's run (its regions are the job's problem runs, as any job's problems
are); `kforge.job.workload` writes these names on it, and `workload_table` reads them. They are the
workload's own and none of `kforge.tracking.schema`'s, which they sit beside.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

#: The experiment ``conf/experiment/whole_workload.yaml`` logs into, and the table reads.
WORKLOAD_EXPERIMENT = "kforge-whole_workload"
TABLE = "whole_workload"


class WTags:
    """Tags of a workload's parent run."""

    MODEL = "workload"
    """The model file's name (``transformer_block.py``); only a workload's parent run has it."""
    MODEL_PATH = "workload.model"
    DIR = "workload.dir"
    """The extraction's folder on the machine that ran it (reused by a rerun of the same configuration)."""
    STATE = "workload.state"
    """The assembled model's verdict (``correct``, ``numerical_mismatch``...), ``unchanged`` when no region was
    solved, ``interrupted`` when the job was cut off before assembly."""
    MESSAGE = "workload.message"
    UNSOLVED = "workload.unsolved"
    """Regions no candidate solved (they keep the model's module), comma-separated."""


class WMetrics:
    """Metrics of a workload's parent run."""

    COVERAGE = "workload_coverage"
    REGIONS = "workload_regions"
    SOLVED = "workload_regions_solved"
    REPLACED_SHARE = "workload_replaced_share"
    CORRECT = "workload_correct"
    SPEEDUP_EAGER = "workload_speedup_vs_eager"
    SPEEDUP_COMPILE = "workload_speedup_vs_compile"
    BOUND = "workload_amdahl_bound"
    SPEEDUP_LO, SPEEDUP_HI = "workload_speedup_vs_eager_lo", "workload_speedup_vs_eager_hi"
    """The end-to-end speedup's interval (`kforge.verify.retime`)."""
    BOUND_LO, BOUND_HI = "workload_amdahl_bound_lo", "workload_amdahl_bound_hi"
    """Amdahl's bound at the ends of the regions' intervals."""
    MODEL_MS = "workload_model_ms"
    """The model's operator time per forward in the profile."""


class WFiles:
    """A workload parent run's artifacts."""

    FOLDER = "workload"
    """The extraction (workload.json, region files, profile.txt/png/json) and, after assembly, kernels/."""
    PROFILE_TABLE = "workload/profile.txt"
    PROFILE_PLOT = "workload/profile.png"
    ASSEMBLED = "workload/assembled.py"
    RESULT = "workload/result.json"
    SUMMARY = "workload/summary.txt"


def load_workload_runs(client, experiment: str = WORKLOAD_EXPERIMENT) -> pd.DataFrame:
    """Parent runs of workload jobs in ``experiment`` (any status), one row each; empty when there are none."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return pd.DataFrame()
    rows = []
    for r in client.search_runs([exp.experiment_id], f"tags.`{WTags.MODEL}` != ''", max_results=50000):
        t, m = r.data.tags, r.data.metrics
        rows.append(dict(run_id=r.info.run_id, status=r.info.status, start_time=r.info.start_time,
                         workload=t.get(WTags.MODEL, ""), model=t.get("model", ""), backend=t.get("backend", ""),
                         state=t.get(WTags.STATE, ""), **{k: m.get(k) for k in _METRICS}))
    return pd.DataFrame(rows)


_METRICS = (WMetrics.COVERAGE, WMetrics.REGIONS, WMetrics.SOLVED, WMetrics.REPLACED_SHARE, WMetrics.CORRECT,
            WMetrics.SPEEDUP_EAGER, WMetrics.SPEEDUP_COMPILE, WMetrics.BOUND)
#: The table's columns after its keys: (key, heading).
COLUMNS = (("coverage", "coverage"), ("regions_solved", "regions solved"), ("verdict", "whole model"),
           ("speedup_eager", "e2e vs eager"), ("speedup_compile", "e2e vs compile"), ("bound", "Amdahl bound"))
KEYS = ("workload", "model", "backend")


def _x(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.2f}x"


def workload_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload, model and backend, its newest run that reached assembly: coverage, regions solved, the
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


CAPTION = ("whole_workload: per workload, model and backend, the newest job that reached assembly. coverage: share of "
           "the model's operator time in the extracted regions; regions solved: regions with a correct kernel (the "
           "others keep the model's own module); whole model: the assembled model's verdict against the original; "
           "e2e: the assembled model's speedup over the original in PyTorch eager and under torch.compile; Amdahl "
           "bound: 1 / (1 - Σs + Σ s/k) over the solved regions' shares s and their own speedups k.")


def write_workload_table(client, out_dir, experiment: str = WORKLOAD_EXPERIMENT) -> dict[str, dict[str, Any]]:
    """``whole_workload.md`` and ``.csv`` under ``out_dir``, in the shape `kforge.report.render.build_all` returns
    per table ({} when the experiment has no workload runs)."""
    from pathlib import Path
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

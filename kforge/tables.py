"""The paper's ablation tables, from MLflow runs, with pandas.

One row per (model, backend, level, factor): correctness rate, fast_1, fast_1.5 (each with k/n) and
the geometric-mean speedup over correct kernels; written as Markdown, CSV and LaTeX. Plots: fast_p
curves (p from 0 to 3) per configuration, and correctness and speedup by iteration.

Runs are deduplicated: for one configuration and problem only the newest finished run counts, so a
resumed or repeated sweep never counts a problem twice.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from .metrics import geomean

#: Ablation name -> (MLflow experiment, the tag that holds its factor).
ABLATIONS: dict[str, tuple[str, str]] = {
    "single_vs_iterative": ("kforge-single_vs_iterative", "loop_mode"),
    "reference_transfer": ("kforge-reference_transfer", "reference"),
    "profiling_ablation": ("kforge-profiling_ablation", "analysis"),
}
CONFIG_TAGS = ("model", "backend", "loop_mode", "reference", "profiler", "analysis", "size", "problems_source")


def load_runs(client, experiment: str) -> pd.DataFrame:
    """Problem runs of one experiment as a DataFrame (empty when the experiment does not exist)."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return pd.DataFrame()
    rows = []
    for r in client.search_runs([exp.experiment_id], "tags.`kforge.kind` = 'problem'", max_results=50000):
        t, m = r.data.tags, r.data.metrics
        row = {k: t.get(k, "") for k in CONFIG_TAGS}
        row.update(run_id=r.info.run_id, status=r.info.status, start_time=r.info.start_time,
                   problem=t.get("problem", ""), level=t.get("level", ""), parent=t.get("mlflow.parentRunId", ""),
                   correct=bool(m.get("best_correct", 0.0)), speedup_eager=m.get("best_speedup_eager"),
                   speedup_compile=m.get("best_speedup_compile"), iterations=m.get("iterations"),
                   cost_usd=m.get("total_cost_usd"))
        rows.append(row)
    return pd.DataFrame(rows)


def dedupe(df: pd.DataFrame) -> pd.DataFrame:
    """The newest FINISHED run per configuration and problem."""
    if df.empty:
        return df
    done = df[df["status"] == "FINISHED"]
    keys = [c for c in (*CONFIG_TAGS, "problem") if c in done.columns]
    return done.sort_values("start_time").groupby(keys, dropna=False, as_index=False).tail(1).reset_index(drop=True)


def _speedup(row: pd.Series, baseline: str) -> float | None:
    s = row["speedup_compile"] if baseline == "compile" else row["speedup_eager"]
    return None if s is None or (isinstance(s, float) and math.isnan(s)) else float(s)


def summarise(group: pd.DataFrame, baseline: str = "eager") -> dict[str, Any]:
    n = len(group)
    speed = [_speedup(r, baseline) if r["correct"] else None for _, r in group.iterrows()]
    k_correct = int(group["correct"].sum())
    k1 = sum(1 for s in speed if s is not None and s > 1.0)
    k15 = sum(1 for s in speed if s is not None and s > 1.5)
    g = geomean(speed)
    return {"n": n, "correct": f"{k_correct}/{n}", "correct_rate": k_correct / n if n else 0.0,
            "fast_1": f"{k1}/{n}", "fast_1_rate": k1 / n if n else 0.0, "fast_1.5": f"{k15}/{n}",
            "fast_1.5_rate": k15 / n if n else 0.0, "geomean_speedup": g}


def ablation_table(df: pd.DataFrame, factor: str, baseline: str = "eager") -> pd.DataFrame:
    """Rows by model x backend x level x factor, plus an ``all`` level row per model x backend x factor."""
    if df.empty:
        return pd.DataFrame(columns=["model", "backend", "level", factor, "n", "correct", "fast_1", "fast_1.5",
                                     "geomean_speedup"])
    rows = []
    for keys, group in df.groupby(["model", "backend", "level", factor], dropna=False):
        rows.append(dict(zip(["model", "backend", "level", factor], keys), **summarise(group, baseline)))
    for keys, group in df.groupby(["model", "backend", factor], dropna=False):
        rows.append(dict(zip(["model", "backend", factor], keys), level="all", **summarise(group, baseline)))
    out = pd.DataFrame(rows)
    out["level"] = out["level"].astype(str)
    return out.sort_values(["model", "backend", "level", factor], key=lambda s: s.map(str)).reset_index(drop=True)


def fast_p_curve(df: pd.DataFrame, factor: str, ps=None, baseline: str = "eager") -> pd.DataFrame:
    """fast_p for p in [0, 3] per configuration (model, backend, factor)."""
    ps = ps if ps is not None else [round(0.1 * i, 2) for i in range(31)]
    rows = []
    for keys, group in df.groupby(["model", "backend", factor], dropna=False):
        speed = [_speedup(r, baseline) if r["correct"] else None for _, r in group.iterrows()]
        n = len(group)
        for p in ps:
            # fast_0 is the correctness rate (an untimed correct kernel counts there only)
            k = int(group["correct"].sum()) if p == 0 else sum(1 for s in speed if s is not None and s > p)
            rows.append({"model": keys[0], "backend": keys[1], factor: keys[2], "p": p, "fast_p": k / n if n else 0.0})
    return pd.DataFrame(rows)


def by_iteration(client, df: pd.DataFrame, factor: str) -> pd.DataFrame:
    """Correctness rate and geomean best-so-far speedup after each iteration, per configuration."""
    rows = []
    for _, r in df.iterrows():
        correct = {m.step: m.value for m in client.get_metric_history(r["run_id"], "correct")}
        speed = {m.step: m.value for m in client.get_metric_history(r["run_id"], "speedup_eager")}
        best = None
        for step in range(int(r["iterations"] or 0)):
            if correct.get(step) and speed.get(step):
                best = max(best or 0.0, speed[step])
            rows.append({"model": r["model"], "backend": r["backend"], factor: r[factor], "problem": r["problem"],
                         "iteration": step, "correct": best is not None, "best_speedup": best})
    hist = pd.DataFrame(rows)
    if hist.empty:
        return hist
    agg = []
    for keys, g in hist.groupby(["model", "backend", factor, "iteration"], dropna=False):
        agg.append(dict(zip(["model", "backend", factor, "iteration"], keys), correct_rate=g["correct"].mean(),
                        geomean_speedup=geomean(g["best_speedup"].tolist()), n=len(g)))
    return pd.DataFrame(agg)


def to_markdown(df: pd.DataFrame, columns: list[str]) -> str:
    def cell(v):
        if isinstance(v, float):
            return "-" if math.isnan(v) else f"{v:.2f}"
        return "-" if v is None else str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(cell(r[c]) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def write_table(table: pd.DataFrame, factor: str, out_dir: Path, name: str) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    cols = ["model", "backend", "level", factor, "correct", "fast_1", "fast_1.5", "geomean_speedup"]
    shown = table[cols] if not table.empty else table
    paths = {"md": out_dir / f"{name}.md", "csv": out_dir / f"{name}.csv", "tex": out_dir / f"{name}.tex"}
    paths["md"].write_text(f"### {name}\n\n" + to_markdown(shown, cols))
    table.to_csv(paths["csv"], index=False)
    paths["tex"].write_text(shown.to_latex(index=False, float_format="%.2f", na_rep="-"))
    return paths


def plot_fast_p(curve: pd.DataFrame, factor: str, path: Path, title: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4), dpi=110)
    for keys, g in curve.groupby(["model", "backend", factor], dropna=False):
        ax.plot(g["p"], g["fast_p"], marker=".", label=f"{keys[0]} · {keys[1]} · {factor}={keys[2]}")
    ax.set_xlabel("speedup threshold p (over PyTorch eager)")
    ax.set_ylabel("fast_p: correct and faster than p")
    ax.set_ylim(0, 1.02)
    ax.axvline(1.0, color="0.7", lw=0.8)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_iterations(hist: pd.DataFrame, factor: str, path: Path, title: str) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    for keys, g in hist.groupby(["model", "backend", factor], dropna=False):
        label = f"{keys[0]} · {keys[1]} · {factor}={keys[2]}"
        g = g.sort_values("iteration")
        a1.plot(g["iteration"] + 1, g["correct_rate"], marker="o", label=label)
        a2.plot(g["iteration"] + 1, g["geomean_speedup"], marker="o", label=label)
    a1.set_xlabel("iteration")
    a1.set_ylabel("correct so far")
    a1.set_ylim(0, 1.02)
    a2.set_xlabel("iteration")
    a2.set_ylabel("geomean best speedup (correct)")
    a1.set_title(title, fontsize=10)
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def build_all(client, out_dir: str | Path, ablations: list[str] | None = None,
              baseline: str = "eager") -> dict[str, dict[str, Any]]:
    """Every ablation's table and plots under ``out_dir``; returns what was written per ablation."""
    out = Path(out_dir)
    results = {}
    for name in ablations or list(ABLATIONS):
        experiment, factor = ABLATIONS[name]
        runs = dedupe(load_runs(client, experiment))
        if runs.empty:
            results[name] = {"experiment": experiment, "runs": 0}
            continue
        table = ablation_table(runs, factor, baseline)
        files = write_table(table, factor, out, name)
        files["fast_p"] = plot_fast_p(fast_p_curve(runs, factor, baseline=baseline), factor, out / f"{name}_fast_p.png",
                                      f"{name}: fast_p")
        hist = by_iteration(client, runs, factor)
        if not hist.empty:
            files["iterations"] = plot_iterations(hist, factor, out / f"{name}_by_iteration.png", name)
        results[name] = {"experiment": experiment, "runs": len(runs), "table": table, "files": files}
    return results

"""The MLflow views kforge's addresses open, beyond the runs table of `tracking.view`: an experiment's
ablation view, and the addresses of every kforge experiment in a store (`kforge ui` prints them).

The ablation view shows the problems' runs grouped by what the experiment's jobs differ in (its factor,
e.g. ``loop_mode``), with that factor and the arm's figures as the first columns. MLflow's group row can only
take the min, mean or max of a column (a mean of speedups is not the tables' geomean, and a mean of a few
equal numbers prints float noise, 0.5742999999999999), so every problem run carries its arm's figures as the
tables count them (`arm_figures`: correctness rate, fast_1, geomean speedup, to four digits), and the group row
takes their max: the figure itself. It is a saved view (the experiment tag
``mlflow.sharedViewState.kforge-ablation``, listed under MLflow's "Views"), written with the figures when the
addresses are asked for and when a job ends, from the runs the store holds then.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..tracking.schema import Kind, Metrics, Tags
from ..tracking.view import VIEW_ID, VIEW_TAG, runs_url

#: The saved view (experiment tag ``mlflow.sharedViewState.<id>``) an ablation's address opens.
ABLATION_VIEW = "kforge-ablation"
#: Configuration an experiment's jobs may differ in: the first of these that varies is its factor.
FACTORS = ("loop_mode", "model", "reference", "analysis", "profiler", "backend", "level")


#: A problem run's arm figures, in the order the ablation view shows them.
ARM_METRICS = (Metrics.ARM_CORRECTNESS_RATE, Metrics.ARM_FAST_1, Metrics.arm_geomean_speedup("eager"),
               Metrics.ARM_PROBLEMS)


def _problem_runs(client, experiment_id: str) -> list:
    return client.search_runs([experiment_id], filter_string=f"tags.`{Tags.KIND}` = '{Kind.PROBLEM}'",
                              max_results=50000)


def factor_of(client, experiment_id: str, runs: list | None = None) -> str | None:
    """The configuration its jobs differ in (`FACTORS`, first first); None when all its jobs are alike."""
    runs = _problem_runs(client, experiment_id) if runs is None else runs
    for name in FACTORS:
        if len({r.data.tags.get(name) for r in runs} - {None}) > 1:
            return name
    return None


def arm_figures(runs: list, group: str) -> dict[str, dict[str, float | None]]:
    """Each value of ``group`` among the problem ``runs`` -> its figures as the tables count them: over the newest
    finished run of each configuration and problem, the correctness rate, fast_1 and the geomean speedup over
    eager of correct kernels (the last two leaving degenerate problems out)."""
    import pandas as pd

    from ..metrics import SPEEDUP_FIELD
    from ..tracking.schema import CONFIG_TAGS, metric
    from .runs import dedupe
    from .tables import Context, faster, geomean_speedup, rate
    rows = [{**{k: r.data.tags.get(k, "") for k in CONFIG_TAGS}, "group": r.data.tags.get(group, ""),
             "problem": r.data.tags.get(Tags.PROBLEM, ""), "status": r.info.status, "start_time": r.info.start_time,
             "correct": bool(r.data.metrics.get(Metrics.BEST_CORRECT, 0.0)),
             SPEEDUP_FIELD["eager"]: metric(r.data.metrics, Metrics.best_speedup("eager")),
             "degenerate": "degenerate" in r.data.tags.get(Tags.PROBLEM_FLAGS, "").split(",")} for r in runs]
    df = dedupe(pd.DataFrame(rows))
    ctx, out = Context(resamples=1), {}
    for value, g in (df.groupby("group") if not df.empty else []):
        out[value] = {Metrics.ARM_PROBLEMS: len(g),
                      Metrics.ARM_CORRECTNESS_RATE: rate(lambda x, c: x["correct"].to_numpy(dtype=bool))(g, ctx).value,
                      Metrics.ARM_FAST_1: rate(faster(1.0))(g, ctx).value,
                      Metrics.arm_geomean_speedup("eager"): geomean_speedup(g, ctx).value}
    return out


def log_arm_figures(client, runs: list, group: str) -> int:
    """Give every problem run its arm's figures (`arm_figures`), where they changed; how many runs were written."""
    from ..tracking.tracker import as_metrics
    figures, written = arm_figures(runs, group), 0
    for r in runs:
        want = as_metrics(figures.get(r.data.tags.get(group, ""), {}))
        if any(r.data.metrics.get(m.key) != m.value for m in want):
            client.log_batch(r.info.run_id, metrics=want)
            written += 1
    return written


def ablation_state(factor: str | None) -> dict[str, Any]:
    """The ablation view: problems only, grouped by ``factor`` (by level where none varies); the factor (a
    parameter) and the arm's figures first, then each problem's; a group's row takes the max, which for the
    arm's figures (alike on every run of the group) is the figure itself."""
    group = factor or Tags.LEVEL
    columns = [f"params.`{group}`", *(f"metrics.`{m}`" for m in ARM_METRICS),
               f"metrics.`{Metrics.best_speedup('eager')}`", f"tags.`{Tags.STATE}`", f"metrics.`{Metrics.ITERATIONS}`",
               f"params.`{Tags.PROBLEM}`", f"params.`{Tags.LEVEL}`", f"params.`{Tags.MODEL}`",
               f"metrics.`{Metrics.best_speedup('compile')}`"]
    columns = list(dict.fromkeys(columns))
    return {"selectedColumns": columns, "columnOrder": ["run_name", *columns],
            "columnWidths": {c: 150 if c.startswith("metrics") else 110 for c in columns},
            "groupBy": {"aggregateFunction": "max", "groupByKeys": [{"mode": "tag", "groupByData": group}]},
            "groupsExpanded": {}, "searchFilter": f"tags.`{Tags.KIND}` = '{Kind.PROBLEM}'",
            "orderByKey": f"tags.`{Tags.PROBLEM}`", "orderByAsc": True}


def save_ablation_view(client, experiment_id: str) -> str | None:
    """Write the experiment's ablation view (a tag MLflow's "Views" menu lists) and its arms' figures on their
    problem runs; its factor."""
    runs = _problem_runs(client, experiment_id)
    factor = factor_of(client, experiment_id, runs)
    log_arm_figures(client, runs, factor or Tags.LEVEL)
    view = json.dumps({"name": f"kforge: problems by {factor or 'level'}", "createdAt": 1_767_225_600_000,
                       "updatedAt": 1_767_225_600_000, "state": json.dumps(ablation_state(factor))})
    tag = f"mlflow.sharedViewState.{ABLATION_VIEW}"
    if client.get_experiment(experiment_id).tags.get(tag) != view:
        client.set_experiment_tag(experiment_id, tag, view)
    return factor


def ablation_url(base: str, experiment_id: str) -> str:
    """The experiment's ablation view (`save_ablation_view` writes it)."""
    return runs_url(base, experiment_id).replace(f"viewStateShareKey={VIEW_ID}", f"viewStateShareKey={ABLATION_VIEW}")


@dataclass(frozen=True)
class Address:
    """Where one kforge experiment of a store shows."""

    experiment: str
    """Its name."""
    ablation: str
    """Its ablation view: problems grouped by ``factor``, correctness and speedup first."""
    runs: str
    """Its runs table in kforge's saved view (problems and jobs)."""
    factor: str | None
    """What its jobs differ in (None: all alike; the view then groups by level)."""


def addresses(client, base: str) -> list[Address]:
    """Each kforge experiment of the store ``client`` opens, its ablation view saved, as served at ``base``."""
    out = []
    for exp in client.search_experiments():
        if VIEW_TAG not in exp.tags:
            continue
        factor = save_ablation_view(client, exp.experiment_id)
        out.append(Address(exp.name, ablation_url(base, exp.experiment_id), runs_url(base, exp.experiment_id), factor))
    return out

"""The MLflow views kforge's addresses open, beyond the runs table of `tracking.view`: an experiment's
ablation view, and the addresses of every kforge experiment in a store (`kforge ui` prints them).

The ablation view shows the problems' runs grouped by what the experiment's jobs differ in (its factor,
e.g. ``loop_mode``), with that factor, correctness and best speedup as the first columns; each group's
row shows their mean, so ``best_correct`` (0/1) reads as the arm's correctness rate. It is a saved view
(the experiment tag ``mlflow.sharedViewState.kforge-ablation``, listed under MLflow's "Views"), written
when the addresses are asked for, from the runs the store holds then.
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


def factor_of(client, experiment_id: str) -> str | None:
    """The configuration its jobs differ in (`FACTORS`, first first); None when all its jobs are alike."""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{Tags.KIND}` = '{Kind.PROBLEM}'",
                              max_results=5000)
    for name in FACTORS:
        if len({r.data.tags.get(name) for r in runs} - {None}) > 1:
            return name
    return None


def ablation_state(factor: str | None) -> dict[str, Any]:
    """The ablation view: problems only, grouped by ``factor`` (by level where none varies), the factor,
    correctness and best speedup first."""
    group = factor or Tags.LEVEL
    columns = [f"tags.`{group}`", f"metrics.`{Metrics.BEST_CORRECT}`", f"metrics.`{Metrics.best_speedup('eager')}`",
               f"tags.`{Tags.STATE}`", f"metrics.`{Metrics.ITERATIONS}`", f"tags.`{Tags.PROBLEM}`",
               f"tags.`{Tags.LEVEL}`", f"tags.`{Tags.MODEL}`", f"metrics.`{Metrics.best_speedup('compile')}`"]
    columns = list(dict.fromkeys(columns))
    return {"selectedColumns": columns, "columnOrder": ["run_name", *columns],
            "columnWidths": {c: 150 if c.startswith("metrics") else 110 for c in columns},
            "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": group}]},
            "groupsExpanded": {}, "searchFilter": f"tags.`{Tags.KIND}` = '{Kind.PROBLEM}'",
            "orderByKey": f"tags.`{Tags.PROBLEM}`", "orderByAsc": True}


def save_ablation_view(client, experiment_id: str) -> str | None:
    """Write the experiment's ablation view (a tag MLflow's "Views" menu lists); its factor."""
    factor = factor_of(client, experiment_id)
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

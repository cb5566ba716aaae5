"""What a person sees first in the MLflow UI: the runs table with kforge's columns, and a job's summary.

MLflow 3 shows an experiment either as GenAI pages (an overview of traces, empty for kforge) or as its
runs table. MLflow 3.4 picks by the experiment tag ``mlflow.experimentKind``; MLflow 3.17 picks by
its GenAI / Model training switch, which the browser remembers and an address can carry as
``workflowType=machine_learning``, and ignores the tag. So kforge does both: it tags its experiments
as custom model development, and prints an address (`runs_url`) that opens the runs table in the
saved view ``kforge`` (an experiment tag MLflow's "Views" menu lists), whose columns are the state,
the speedups, the iteration count and the job's summary metrics, with runs grouped by kind so that
every problem's row shows without expanding its job. A job's parent run carries its table of problems
as its description (`job_summary`, the tag MLflow shows as a run's description).

    python -m kforge.tracking.view [TRACKING_URI] [UI_ADDRESS]    # the address of each kforge experiment
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .schema import Metrics, Params, Tags

#: Where `make ui` serves.
LOCAL_UI = "http://127.0.0.1:5000"
KIND_TAG = "mlflow.experimentKind"
VIEW_ID = "kforge"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"

#: The runs table's columns in the saved view, in order: the arm (parameters every job's and problem's run
#: carries), a problem's state and best speedup, then what its job summarises (the geomean, as the tables),
#: then the rest of the configuration.
VIEW_COLUMNS = tuple(f"{kind}.`{name}`" for kind, name in (
    ("params", Params.MODEL), ("params", Params.BACKEND), ("params", Params.LOOP_MODE),
    ("params", Params.PRECISION), ("params", Params.PASS), ("tags", Tags.STATE), ("metrics", Metrics.best_speedup("eager")), ("metrics", Metrics.CORRECTNESS_RATE),
    ("metrics", Metrics.FAST_1), ("metrics", Metrics.geomean_speedup("eager")), ("metrics", Metrics.ITERATIONS),
    ("metrics", Metrics.PROBLEMS), ("params", Params.LEVEL), ("params", Params.REFERENCE), ("params", Params.ANALYSIS),
    ("metrics", Metrics.best_speedup("compile")), ("metrics", Metrics.TOTAL_COST_USD)))


def view_state() -> dict[str, Any]:
    """The saved view's state, in the shape MLflow's runs table keeps (MLflow 3.17). The two groups (jobs,
    problems) take the max of a column: a mean of speedups would be no figure the tables print, and it prints
    float noise."""
    return {"selectedColumns": list(VIEW_COLUMNS), "columnOrder": ["run_name", *VIEW_COLUMNS],
            "columnWidths": {c: 135 if c.startswith("metrics") else 95 for c in VIEW_COLUMNS},
            "groupBy": {"aggregateFunction": "max",
                        "groupByKeys": [{"mode": "tag", "groupByData": Tags.KIND}]},
            "groupsExpanded": {}, "searchFilter": "", "orderByKey": "attributes.start_time", "orderByAsc": False}


def experiment_tags(existing: dict[str, str] | None = None) -> dict[str, str]:
    """Tags that make the UI open a kforge experiment on its runs table; those ``existing`` lacks."""
    existing = existing or {}
    # MLflow reads the view's times as epoch milliseconds; a fixed time keeps the tag from changing.
    view = json.dumps({"name": "kforge: problems and jobs", "createdAt": 1_767_225_600_000,
                       "updatedAt": 1_767_225_600_000, "state": json.dumps(view_state())})
    out = {}
    if KIND_TAG not in existing:  # a kind chosen in the UI stays
        out[KIND_TAG] = "custom_model_development"
    if existing.get(VIEW_TAG) != view:
        out[VIEW_TAG] = view
    return out


def runs_url(base: str, experiment_id: str) -> str:
    """The runs table of one experiment in the saved view, whatever the browser last chose."""
    return (f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
            f"&viewStateShareKey={VIEW_ID}")


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v else "-"


def job_summary(title: dict[str, str], results: list, stats: dict[str, Any], speedup_vs: str,
                status: str) -> str:
    """The job's description: what ran, its summary metrics, and one row per problem."""
    n = len(results)
    label = title.get(Tags.MODEL_LABEL) or title.get(Tags.MODEL, "?")
    reference, analysis = title.get(Tags.REFERENCE, "none"), title.get(Tags.ANALYSIS, "off")
    head = (f"**{label}** · backend `{title.get(Tags.BACKEND, '?')}` · `{title.get(Tags.LOOP_MODE, '?')}`"
            f"{' · reference `' + reference + '`' if reference != 'none' else ''}"
            f"{' · analysis `' + analysis + '`' if analysis != 'off' else ''}")
    k = sum(1 for r in results if r.correct)
    best = [r.best_speedup(speedup_vs) for r in results]
    k1 = round(stats.get("fast_1", 0.0) * n)  # the job's fast_1, counted once (`kforge.loop.job_stats`)
    g = stats.get("geomean_speedup")
    lines = [head, "",
             f"{n} problem(s): **{k} correct**, {k1} correct and faster (fast_1), geomean speedup "
             f"**{_x(g)}** over correct kernels. Speedups are against PyTorch {speedup_vs}, timed in the same "
             "process." + ("" if status == "FINISHED" else f" The job was **{status}**: rows cover the "
                                                          "problems that finished."),
             "", f"| problem | state | best speedup vs {speedup_vs} | iterations |", "| --- | --- | ---: | ---: |"]
    for r, s in zip(results, best):
        lines.append(f"| {r.problem.key} | {r.outcome} | {_x(s)} | {len(r.records)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the runs-table address of every kforge experiment in a store."""
    from .store import default_uri, open_client
    argv = sys.argv[1:] if argv is None else argv
    uri = argv[0] if argv else default_uri()
    base = argv[1] if len(argv) > 1 else LOCAL_UI
    client = open_client(uri)
    found = [e for e in client.search_experiments() if VIEW_TAG in e.tags]
    if found:
        print("kforge experiments, each opening on its runs table:")
    for e in found:
        print(f"  {e.name:32} {runs_url(base, e.experiment_id)}")
    if not found:
        print(f"  no kforge experiment in {uri} yet: run `make demo` first")
    return 0


if __name__ == "__main__":
    sys.exit(main())

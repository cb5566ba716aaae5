"""``kforge-tables``: the paper's ablation tables from MLflow — Markdown, CSV, LaTeX and plots under results/.

    kforge-tables                                # every ablation, from ./mlflow.db
    kforge-tables tracking_uri=http://host:5000 baseline=compile
    kforge-tables resamples=10000 confidence=0.99   # the bootstrap intervals

(``python pipelines/tables.py ...`` in a checkout is the same command.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from .hydra_conf import CONF_DIR, discard_run_dir


@hydra.main(config_path=str(CONF_DIR), config_name="tables", version_base="1.3")
def _tables(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from ..errors import ConfigError
    from ..job.config import TablesConfig
    from ..report.render import build_all
    from ..tracking import open_client
    from ..tracking.store import sqlite_path, tracking_uri
    try:
        conf = TablesConfig.from_hydra(cfg)  # strict: a misspelt key, a wrong type or value is named
    except ConfigError as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        discard_run_dir(HydraConfig.get().runtime.output_dir, Path.cwd())  # refused: leave no outputs/ folder
        sys.exit(2)
    try:
        uri = tracking_uri(conf.tracking_uri)
        db = sqlite_path(uri)
        if db is not None and not db.is_file():  # reading: a misspelt path would be made an empty store
            raise ConfigError(f"no MLflow store at {db} (run kforge-reproduce first, or name the store: "
                              "tracking_uri=sqlite:///PATH/mlflow.db)")
        client = open_client(uri)
    except ConfigError as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        discard_run_dir(HydraConfig.get().runtime.output_dir, Path.cwd())
        sys.exit(2)
    results = build_all(client, conf.out_dir, list(conf.ablations), conf.baseline, conf.resamples, conf.confidence)
    for name, res in results.items():
        if not res["runs"]:
            print(f"{name}: no finished runs in experiment {res['experiment']} (run `kforge-reproduce` first; "
                  "`make reproduce` in a checkout)")
            continue
        print(f"\n## {name} ({res['runs']} problem runs, experiment {res['experiment']})\n")
        print(res["files"]["md"].read_text())
        print("files: " + ", ".join(str(p) for p in res["files"].values()))
        if conf.log_to_mlflow:
            log_tables(client, res["experiment"], name, list(res["files"].values()))


def log_tables(client, experiment: str, name: str, files: list) -> str:
    """The ablation's files on its one ``tables-NAME`` run in ``experiment``, made the first time and
    updated (files replaced) every time after: running the command again adds no run."""
    from ..tracking.schema import Kind, Tags, tag_is
    exp = client.get_experiment_by_name(experiment)
    run_name = f"tables-{name}"
    found = client.search_runs([exp.experiment_id], f"{tag_is(Tags.KIND, Kind.TABLES)} and "
                               f"attributes.run_name = '{run_name}'", max_results=1,
                               order_by=["attributes.start_time DESC"])
    if found:
        rid = found[0].info.run_id
        client.update_run(rid, status="RUNNING")
    else:
        rid = client.create_run(exp.experiment_id, run_name=run_name, tags={Tags.KIND: Kind.TABLES}).info.run_id
    for path in files:
        client.log_artifact(rid, str(path), "tables")
    client.set_terminated(rid)
    return rid


def main() -> None:
    from ..errors import ConfigError
    from ..job.config import TablesConfig, check_overrides
    try:  # a misspelt key gets kforge's answer (the valid keys), not Hydra's "not in struct"
        check_overrides(sys.argv[1:], root=TablesConfig)
    except ConfigError as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        sys.exit(2)
    _tables()


if __name__ == "__main__":
    main()

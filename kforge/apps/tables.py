"""``kforge-tables``: the paper's ablation tables from MLflow — Markdown, CSV, LaTeX and plots under results/.

    kforge-tables                                # every ablation, from ./mlflow.db
    kforge-tables tracking_uri=http://host:5000 baseline=compile
    kforge-tables resamples=10000 confidence=0.99   # the bootstrap intervals

(``python pipelines/tables.py ...`` in a checkout is the same command.)
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from .hydra_conf import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="tables", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from ..job.config import TablesConfig
    from ..errors import ConfigError
    from ..metrics import BASELINES
    from ..report.render import build_all
    from ..report.tables import ABLATIONS
    from ..tracking import default_uri, open_client
    from ..tracking.schema import Kind, Tags
    try:
        conf = TablesConfig.from_hydra(cfg)  # strict: a misspelt key is named, with the valid ones
    except ConfigError as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        sys.exit(2)
    unknown = [a for a in conf.ablations if a not in ABLATIONS]
    if unknown:
        print(f"kforge: unknown ablation(s) {unknown} (choose from {', '.join(ABLATIONS)})", file=sys.stderr)
        sys.exit(2)
    if conf.baseline not in BASELINES or not 0 < conf.confidence < 1 or conf.resamples < 1:
        print(f"kforge: baseline must be eager or compile (not {conf.baseline!r}), confidence between 0 and 1 "
              f"(not {conf.confidence}), resamples at least 1 (not {conf.resamples})", file=sys.stderr)
        sys.exit(2)
    client = open_client(conf.tracking_uri or default_uri())
    results = build_all(client, conf.out_dir, list(conf.ablations), conf.baseline, conf.resamples, conf.confidence)
    for name, res in results.items():
        if not res["runs"]:
            print(f"{name}: no finished runs in experiment {res['experiment']} (run `make reproduce` first)")
            continue
        print(f"\n## {name} ({res['runs']} problem runs, experiment {res['experiment']})\n")
        print(res["files"]["md"].read_text())
        print("files: " + ", ".join(str(p) for p in res["files"].values()))
        if conf.log_to_mlflow:
            exp = client.get_experiment_by_name(res["experiment"])
            run = client.create_run(exp.experiment_id, run_name=f"tables-{name}", tags={Tags.KIND: Kind.TABLES})
            for path in res["files"].values():
                client.log_artifact(run.info.run_id, str(path), "tables")
            client.set_terminated(run.info.run_id)


if __name__ == "__main__":
    main()

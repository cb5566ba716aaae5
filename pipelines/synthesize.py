"""Synthesis sweeps: models x backends x problems x reference transfer x loop settings, into MLflow.

    python pipelines/synthesize.py model=oracle backend=cpu problems=builtin_l1
    python pipelines/synthesize.py -m loop=single_shot,iterative model=gpt-5,claude-opus
    python pipelines/synthesize.py --help        # every config group and its choices

Each Hydra job is one MLflow parent run; each problem a nested run; each iteration a step.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kforge.llm import LLMError  # noqa: E402
from kforge.pipeline import ConfigError, run  # noqa: E402
from kforge.problems import ProblemError  # noqa: E402
from kforge.verify import BackendUnavailable  # noqa: E402


@hydra.main(config_path="../conf", config_name="synthesize", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from kforge.pipeline import split_gpus
    from kforge.verify.gpus import detect_gpus
    hc = HydraConfig.get()
    tags = {"hydra.job": hc.job.name, "hydra.output_dir": hc.runtime.output_dir}
    if hc.mode.name == "MULTIRUN":
        tags["hydra.job_num"] = str(hc.job.num)
        tags["hydra.sweep_dir"] = hc.sweep.dir
        launcher = str(hc.launcher.get("_target_", ""))
        if "joblib" in launcher.lower() and cfg.workers.gpus is None:
            # Jobs run side by side on this host: give each its own GPUs.
            import os
            n_jobs = int(hc.launcher.get("n_jobs") or 1)
            n_jobs = (os.cpu_count() or 1) if n_jobs < 0 else n_jobs
            with open_dict(cfg):
                cfg.workers.gpus = split_gpus(detect_gpus(), hc.job.num, n_jobs)
            tags["gpus"] = ",".join(map(str, cfg.workers.gpus))
    try:
        result = run(cfg, tags=tags)
    except (LLMError, ConfigError, ProblemError, BackendUnavailable) as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        sys.exit(2)
    if result.interrupted:
        sys.exit(130)
    # The return value lets Hydra's optimisation sweepers use the job's correctness rate.
    return float(result.stats.get("fast_0") or 0.0)


if __name__ == "__main__":
    main()

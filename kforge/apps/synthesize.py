"""``kforge-synthesize``: synthesis sweeps (models x backends x problems x reference transfer x loop
settings) into MLflow, through Hydra.

    kforge-synthesize model=oracle backend=cpu problems=builtin_l1
    kforge-synthesize model=openai/gpt-5 backend=cuda problems=builtin_l2      # any litellm model string
    kforge-synthesize -m loop=single_shot,iterative model=gpt-5,claude-opus
    kforge-synthesize --help        # every config group and its choices

Each Hydra job is one MLflow parent run; each problem a nested run; each iteration a step.
(``python pipelines/synthesize.py ...`` in a checkout is the same command.)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from .hydra_conf import CONF_DIR, check_choices, discard_run_dir, register_model_strings, unset_value


@hydra.main(config_path=str(CONF_DIR), config_name="synthesize", version_base="1.3")
def _job(cfg: DictConfig) -> float:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from ..job.pipeline import ConfigError, needs_compiler_stack, run, split_gpus
    from ..llm import LLMError
    from ..problems import ProblemError
    from ..sandbox.gpus import detect_gpus
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
    from omegaconf.errors import OmegaConfBaseException
    try:
        light = not needs_compiler_stack(cfg.verify.compile_ref, cfg.backend.name)
        pool = sweep_pool(cfg.workers, light) if hc.mode.name == "MULTIRUN" else None
        result = run(cfg, tags=tags, pool=pool)
    except (LLMError, ConfigError, ProblemError, OmegaConfBaseException) as exc:
        # OmegaConf's: a mandatory value left unset (model=litellm without model.name), as what to set
        said = unset_value(exc) if isinstance(exc, OmegaConfBaseException) else exc
        print(f"kforge: {said}", file=sys.stderr)
        discard_run_dir(hc.runtime.output_dir, Path.cwd())  # refused before it ran: no outputs/DATE/TIME/ left
        sys.exit(2)
    except KeyboardInterrupt:  # before the problems started, or while the job was being closed
        print("kforge: interrupted; finished problems are in MLflow: run the same command again to continue",
              file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # whoever read the job's lines is gone (its results are in MLflow): end quietly
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        sys.exit(130)
    if result.interrupted:
        sys.exit(1 if result.extra.get("stopped") else 130)  # stopped on its own (a model server gone), or Ctrl-C
    # The return value lets Hydra's optimisation sweepers use the job's correctness rate.
    return float(result.stats.get("fast_0") or 0.0)


#: The worker pool of the sweep jobs this process runs, by what makes a pool (GPUs, build workers, spares).
_POOLS: dict[tuple, Any] = {}


def sweep_pool(workers: Any, light: bool = False):
    """One worker pool for every job of a sweep that this process runs (Hydra's basic launcher runs them one
    after another here; a joblib worker process, several): each job would otherwise start its workers again,
    torch imported in every one (5-10 s a job on 2 cores). A job with other GPUs, build workers or spares gets a
    pool of its own, the earlier one closed; one closed under a job (a second Ctrl-C) is replaced. Closed when
    the process exits."""
    import atexit

    from ..verify import WorkerPool
    gpus = None if workers.gpus is None else tuple(int(g) for g in workers.gpus)
    key = (gpus, workers.build, bool(workers.spare), light)
    pool = _POOLS.get(key)
    if pool is None or pool.closed:
        for old in _POOLS.values():
            old.close()
        _POOLS.clear()
        pool = _POOLS[key] = WorkerPool(gpus=None if gpus is None else list(gpus), build_workers=workers.build,
                                        spare=bool(workers.spare), light=light)
        atexit.register(pool.close)
    return pool


def check_swept_models(argv: list[str]) -> None:
    """In a sweep over models (``-m model=oracle,gpt-5``), a model that cannot be called (its key unset) is named
    before the first job, as ``kforge-reproduce`` does: it stopped the sweep at its own job, after the jobs before it
    ran. Not where the command line sets a model's own keys (``model.api_key_env=...``): those apply per job."""
    if not {"-m", "--multirun"} & set(argv) or any(a.lstrip("+~").startswith("model.") for a in argv):
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ..errors import ConfigError
    from ..llm import LLMError, ModelConfig, make_model
    from .hydra_conf import model_config
    given = [a for a in argv if a.lstrip("+~").startswith("model=")]
    for override in OverridesParser.create().parse_overrides(given):
        if not override.is_sweep_override():
            continue
        for name in [v for v in override.value().list if isinstance(v, str)]:
            try:
                make_model(ModelConfig.from_dict(model_config(name), "model")).check()
            except LLMError as exc:
                raise ConfigError(f"{exc} (model={name}, checked before the sweep's first job)") from None


def main() -> None:
    from ..errors import ConfigError
    from ..job.config import check_overrides, free_mapping_overrides
    try:  # a misspelt key or choice gets kforge's answer (the valid ones), not Hydra's "not in struct" or search path
        check_overrides(sys.argv[1:])
        check_choices(sys.argv[1:])
        check_swept_models(sys.argv[1:])
    except ConfigError as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        sys.exit(2)
    register_model_strings(sys.argv[1:])
    sys.argv[1:] = free_mapping_overrides(sys.argv[1:])  # model.extra.top_p=0.9 without Hydra's "+" (Hydra reads argv)
    _job()


if __name__ == "__main__":
    main()

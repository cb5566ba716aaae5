"""`make reproduce`: the paper's three ablation sweeps, then the tables.

    python pipelines/reproduce.py --models gpt-5,claude-opus --backends cuda --levels 1,2,3
    python pipelines/reproduce.py --models oracle --backends cpu            # offline dry run
    python pipelines/reproduce.py ... -- loop.concurrency=4                  # extra Hydra overrides

Every model's API key is checked before anything runs. Each sweep is a Hydra multirun of
pipelines/synthesize.py into its own MLflow experiment; pipelines/tables.py then writes the tables.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kforge.llm import LLMError, ModelConfig, make_model  # noqa: E402
from kforge.tables import ABLATIONS  # noqa: E402


def check_models(models: list[str]) -> None:
    """Stop at once, naming the variable, if a model cannot be called."""
    from omegaconf import OmegaConf
    known = sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml"))
    for name in models:
        path = REPO / "conf" / "model" / f"{name}.yaml"
        if not path.is_file():
            raise SystemExit(f"kforge: unknown model {name!r} (choose from {', '.join(known)})")
        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        try:
            make_model(ModelConfig(**{k: v for k, v in cfg.items() if k in ModelConfig.__dataclass_fields__})).check()
        except LLMError as exc:
            raise SystemExit(f"kforge: {exc}\nkforge: set the key and run again, or pass MODELS=oracle for an offline "
                             "dry run (hand-written kernels, not an LLM)") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt-5", help="comma-separated conf/model names")
    ap.add_argument("--backends", default="cpu", help="comma-separated backends")
    ap.add_argument("--levels", default="1,2,3", help="comma-separated levels")
    ap.add_argument("--kernelbench", help="a KernelBench checkout (default: the built-in suite)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="iterations per problem in iterative sweeps (default 5; 2 when every model is offline)")
    ap.add_argument("--ablations", default=",".join(ABLATIONS), help="which sweeps to run")
    ap.add_argument("--tracking-uri", help="MLflow URI (default: sqlite:///mlflow.db here)")
    ap.add_argument("--out", default="results", help="where the tables and plots go")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every sweep (after --)")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    check_models(models)
    if args.iterations is None:
        # The oracle answers the same kernel every time: more iterations only re-verify it.
        args.iterations = 2 if all(m in ("oracle", "scripted") for m in models) else 5
    prefix = "kernelbench_l" if args.kernelbench else "builtin_l"
    groups = ",".join(f"{prefix}{lvl.strip()}" for lvl in args.levels.split(",") if lvl.strip())
    env = None
    if args.kernelbench:
        import os
        env = dict(os.environ, KERNELBENCH_DIR=str(Path(args.kernelbench).expanduser().resolve()))
    uri = args.tracking_uri or f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    for ablation in [a for a in args.ablations.split(",") if a]:
        if ablation not in ABLATIONS:
            raise SystemExit(f"kforge: unknown ablation {ablation!r} (choose from {', '.join(ABLATIONS)})")
        cmd = [sys.executable, str(REPO / "pipelines" / "synthesize.py"), f"experiment={ablation}",
               f"model={','.join(models)}", f"backend={args.backends}", f"problems={groups}",
               f"loop.iterations={args.iterations}", f"tracking.uri={uri}", *args.overrides]
        print(f"\n=== {ablation}: {' '.join(cmd[2:])}", flush=True)
        if subprocess.run(cmd, env=env).returncode != 0:
            print(f"kforge: the {ablation} sweep failed; finished problems are in MLflow. Fix the cause and run "
                  "`make reproduce` again with the same settings.", file=sys.stderr)
            return 1
    cmd = [sys.executable, str(REPO / "pipelines" / "tables.py"), f"tracking_uri={uri}", f"out_dir={args.out}",
           f"ablations=[{args.ablations}]"]
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())

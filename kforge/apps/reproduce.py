"""``kforge-reproduce`` (``make reproduce``): the paper's three ablation sweeps, beam search's and the backward pass's
(forward alone vs a training step), then the tables.

    kforge-reproduce --models gpt-5,claude-opus --backends cuda --levels 1,2,3
    kforge-reproduce --models openai/gpt-5,anthropic/claude-opus-4-5     # any litellm model strings
    kforge-reproduce --models oracle --backends cpu            # offline dry run
    kforge-reproduce ... -- loop.concurrency=4                 # extra Hydra overrides
    kforge-reproduce --models oracle --backends cpu,opencl,triton --sources cpu,opencl,triton \
        --ablations reference_transfer                         # the source x target transfer matrix

Every model's API key is checked before anything runs. Each sweep is a Hydra multirun of
kforge-synthesize into its own MLflow experiment; kforge-tables then writes the tables.
(``python pipelines/reproduce.py ...`` in a checkout is the same command.)
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import PACKAGE_DIR
from ..errors import ConfigError
from ..log import setup as setup_logging
from ..tracking.store import tracking_uri
from .hydra_conf import check_choices, model_config

log = logging.getLogger(__name__)

OFFLINE = ("oracle", "scripted")


def check_models(models: list[str]) -> None:
    """`ConfigError` naming the variable (or the valid models) if a model cannot be called."""
    from ..llm import LLMError, ModelConfig, make_model
    for name in models:
        try:
            cfg = ModelConfig.from_dict(model_config(name), "model")
        except ConfigError as exc:
            raise ConfigError(f"--models {name}: {exc}") from None
        try:
            make_model(cfg).check()
        except LLMError as exc:
            raise ConfigError(f"{exc}\nkforge: set the key and run again, or pass MODELS=oracle for an offline "
                              "dry run (hand-written kernels, not an LLM)") from None


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The sweeps' environment: this kforge importable by ``python -m`` whether installed or a checkout."""
    env = dict(os.environ, **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_DIR.parent)] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env


_LAUNCH, _JOB = re.compile(r"\[HYDRA\] Launching (\d+) jobs?"), re.compile(r"\[HYDRA\] \t#(\d+) : (.*)")


class Stop:
    """Ctrl-C and SIGTERM while sweeps run: passed on to the running sweep, once per signal received (a sweep
    runs in its own session, so a terminal's Ctrl-C reaches it through here alone, and a second one still
    means "now"), and remembered, so that no later sweep starts. kforge-reproduce keeps reading the sweep's
    output until the sweep has closed its jobs: dying first would leave it writing into a closed pipe."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.proc: subprocess.Popen | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.signal = self.signal or signum
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self)


def _die_with_parent() -> None:
    """In the sweep's process (Linux): SIGTERM, a graceful stop, should kforge-reproduce die without passing a
    signal on (SIGKILL); elsewhere nothing."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _sweep(cmd: list[str], env: dict[str, str], name: str, started: float, stop: Stop) -> int:
    """Run one sweep, passing its output through, with a progress line as each of its jobs starts."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, bufsize=1, start_new_session=True,
                            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    stop.proc, total = proc, "?"
    for line in proc.stdout:
        print(line, end="", flush=True)
        if m := _LAUNCH.search(line):
            total = m.group(1)
        elif m := _JOB.search(line):
            print(f"kforge-reproduce: {name}, job {int(m.group(1)) + 1} of {total} "
                  f"({(time.monotonic() - started) / 60:.1f} min so far): {m.group(2)[:100]}", flush=True)
    return proc.wait()


def sweeps(ablation: str, backends: str, sources: str | None) -> list[list[str]]:
    """The Hydra overrides of each sweep an ablation runs. ``reference_transfer`` with ``sources``: per target
    backend, one sweep without a reference and one with each other source's oracle kernels, so every
    (source, target) pair of the matrix runs once and no target is its own source."""
    if ablation != "reference_transfer" or not sources:
        return [[f"backend={backends}"]]
    from ..job.reference import transfer_pairs
    targets = [b for b in backends.split(",") if b]
    pairs = transfer_pairs([s for s in sources.split(",") if s], targets)
    out = []
    for target in targets:
        out.append([f"backend={target}", "reference=none"])
        mine = [s for s, t in pairs if t == target]
        if mine:
            out.append([f"backend={target}", "reference=oracle", f"reference.backend={','.join(mine)}"])
    return out


#: Backends whose kernels are C++ built through kforge's build cache (`kforge build` compiles them).
BUILT = ("cpu", "cuda")


def prebuild(models: list[str], backends: list[str], levels: list[int], env: dict[str, str], stop: "Stop",
             ablations: list[str] = ()) -> None:
    """Compile the oracle's kernels for these backends and levels into the build cache before the sweeps, all
    cores at once while nothing is being timed: every arm of every ablation then finds them built (a cold
    cache otherwise builds them one by one inside the first sweep, beside its timed runs). The precision and
    backward ablations' arms answer with their own solutions (bf16, training steps): those too."""
    from ..problems import builtin_solution_path, load_builtin
    if "oracle" not in models:
        return
    arms = [("fp32", False)] + ([("bf16", False)] if "precision_ablation" in ablations else []) + \
        ([("fp32", True)] if "backward_ablation" in ablations else [])
    for backend in (b for b in backends if b in BUILT):
        found = (builtin_solution_path(pr, backend, precision, backward)
                 for pr in load_builtin(levels=levels) for precision, backward in arms)
        paths = sorted({str(p) for p in found if p})
        if not paths:
            continue
        print(f"\n=== building the oracle's {len(paths)} {backend} kernels into the build cache", flush=True)
        cmd = [sys.executable, "-m", "kforge.cli", "build", *paths, "--backend", backend,
               "--jobs", str(max(1, os.cpu_count() or 1))]
        stop.proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        if stop.proc.wait() != 0:  # a kernel that does not build is the sweep's to report, as a verdict
            log.warning("kforge: building the oracle's %s kernels failed; the sweeps build what they need", backend)


def main(argv: list[str] | None = None) -> int:
    from ..job.config import check_overrides
    from ..report.tables import ABLATIONS
    setup_logging()
    ap = argparse.ArgumentParser(prog="kforge-reproduce", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="gpt-5", help="comma-separated conf/model names or litellm model strings")
    ap.add_argument("--backends", default="cpu", help="comma-separated backends")
    ap.add_argument("--levels", default="1,2,3", help="comma-separated levels")
    ap.add_argument("--sources", help="reference_transfer: comma-separated backends whose oracle kernels are the "
                    "reference (each target runs with every other one and with none: the transfer matrix); "
                    "default: the experiment's own (auto: cuda, or triton for a cuda target)")
    ap.add_argument("--kernelbench", help="a KernelBench checkout (default: the built-in suite)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="iterations per problem in iterative sweeps (default 5; 2 when every model is offline)")
    ap.add_argument("--ablations", default=",".join(ABLATIONS),
                    help=f"which sweeps to run, comma-separated (default: all of {', '.join(ABLATIONS)})")
    ap.add_argument("--tracking-uri", help="MLflow URI, or a path ending in .db (default: sqlite:///mlflow.db here)")
    ap.add_argument("--out", default="results", help="where the tables and plots go")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every sweep (after --)")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    try:
        check_models(models)
    except ConfigError as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        return 2
    ablations = [a for a in args.ablations.split(",") if a]
    unknown = [a for a in ablations if a not in ABLATIONS]
    if unknown:
        print(f"kforge: unknown ablation {unknown[0]!r} (choose from {', '.join(ABLATIONS)})", file=sys.stderr)
        return 2
    if args.iterations is not None and args.iterations < 1:  # before the oracle builds, not after a sweep fails
        print(f"kforge: --iterations {args.iterations}: at least one iteration per problem is needed", file=sys.stderr)
        return 2
    if args.iterations is None:
        # The oracle answers the same kernel every time: more iterations only re-verify it.
        args.iterations = 2 if all(m in OFFLINE for m in models) else 5
    prefix = "kernelbench_l" if args.kernelbench else "builtin_l"
    groups = ",".join(f"{prefix}{lvl.strip()}" for lvl in args.levels.split(",") if lvl.strip())
    try:  # a wrong backend, level or override is answered now, not by each sweep's Hydra
        common = [f"backend={args.backends}", f"problems={groups}", *args.overrides]
        check_overrides(common)
        check_choices(common)
    except ConfigError as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        return 2
    try:  # a folder or plain path for the store is refused now, not by MLflow in the first sweep's job
        uri = tracking_uri(args.tracking_uri)
    except ConfigError as exc:
        print(f"kforge: {exc}", file=sys.stderr)
        return 2
    from ..job.config import out_dir_problem
    if problem := out_dir_problem(args.out, "--out"):  # the tables are written last: after every sweep
        print(f"kforge: {problem}", file=sys.stderr)
        return 2
    env = _env({"KERNELBENCH_DIR": str(Path(args.kernelbench).expanduser().resolve())} if args.kernelbench else None)
    started, stop = time.monotonic(), Stop()
    stop.install()
    # The whole built-in suite at these levels (not a part of it picked by problems.*=): the oracle's kernels are
    # known before any sweep asks for them.
    if not args.kernelbench and not any(o.lstrip("+~").startswith("problems.") for o in args.overrides):
        prebuild(models, [b.strip() for b in args.backends.split(",")],
                 [int(lv) for lv in args.levels.split(",") if lv.strip()], env, stop, ablations)
    for ablation in ablations:
        if stop.signal:
            print(f"kforge-reproduce: stopped by {signal.Signals(stop.signal).name} before the {ablation} sweep; "
                  "run the same command again to continue", file=sys.stderr, flush=True)
            return 128 + stop.signal
        if ablation not in ABLATIONS:
            raise SystemExit(f"kforge: unknown ablation {ablation!r} (choose from {', '.join(ABLATIONS)})")
        for extra in sweeps(ablation, args.backends, args.sources):
            cmd = [sys.executable, "-m", "kforge.apps.synthesize", "-m", f"experiment={ablation}",
                   f"model={','.join(models)}", *extra, f"problems={groups}",
                   f"loop.iterations={args.iterations}", f"tracking.uri={uri}", *args.overrides]
            print(f"\n=== {ablation}: kforge-synthesize {' '.join(cmd[3:])}", flush=True)
            rc = _sweep(cmd, env, f"{ablation} ({ablations.index(ablation) + 1} of {len(ablations)})", started, stop)
            if stop.signal:
                print(f"kforge-reproduce: stopped by {signal.Signals(stop.signal).name} in the {ablation} sweep; "
                      "finished problems are in MLflow: run the same command again to continue", file=sys.stderr,
                      flush=True)
                return 128 + stop.signal
            if rc != 0:
                log.error("kforge: the %s sweep failed; finished problems are in MLflow. Fix the cause and run "
                          "`make reproduce` again with the same settings.", ablation)
                return 1
    cmd = [sys.executable, "-m", "kforge.apps.tables", f"tracking_uri={uri}", f"out_dir={args.out}",
           f"ablations=[{args.ablations}]"]
    stop.proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    return stop.proc.wait()


if __name__ == "__main__":
    sys.exit(main())

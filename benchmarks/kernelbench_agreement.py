"""Does kforge under ``--rules kernelbench`` call a candidate correct exactly when KernelBench's harness does?

    python benchmarks/kernelbench_agreement.py --kernelbench ~/KernelBench --manifest corpus/manifest.csv \\
        --out agreement/ [--jobs 16] [--trials 5 --timed 100] [--gpu-arch Hopper] [--deadline 560] \\
        [--precision fp32|bf16|fp16] [--backend cuda|triton]

The manifest (CSV with a header, or JSONL) lists ``problem,candidate[,source][,backend]``: a problem is a path
in the KernelBench checkout (``KernelBench/level1/19_ReLU.py``), beside the manifest, or absolute; a candidate
is a program binding ``ModelNew``, relative to the manifest; ``backend`` is ``cuda`` (a ``load_inline``
extension, the default) or ``triton``, else ``--backend``. Both harnesses judge at ``--precision``
(KernelBench's ``precision`` dtype: inputs and weights cast, its tolerance; ``kforge eval --precision``).
Four steps, each resumable (a rerun with the same ``--out`` skips what is recorded there, so several calls of
a limited length finish it; an ``--out`` made at another precision is refused):

1. ``build``: KernelBench's own precompile of the ``cuda`` candidates (``kernelbench.eval.build_compile_cache``,
   as ``scripts/eval_from_generations.py``'s ``build_cache`` does): one spawned process per candidate,
   ``--jobs`` at a time, a build folder per candidate; then ``ModelNew`` is constructed there once, so an
   extension built in ``__init__`` lands in the same folder (KernelBench's eval reuses it; its verdict is
   unchanged). A Triton candidate has nothing to precompile (its kernels compile at their first launch).
2. ``kforge``: ``python -m kforge.cli eval --manifest ... --rules kernelbench`` (each row's backend;
   ``--precision`` unless fp32, kforge's default).
3. ``kernelbench``: ``eval_kernel_against_ref`` per candidate, each in a fresh process, one at a time
   unless ``--eval-jobs`` says otherwise (seed 42, ``--trials`` correctness trials, ``--timed`` timed ones,
   cuda events, the row's backend: ``triton`` imports the candidate from a temporary file, ``cuda`` executes
   it; a process that hangs is killed after ``--timeout``, one that dies is a row).
4. ``report``: the table (stdout, ``OUT/agreement.md``, ``OUT/agreement.csv``), the agreement count overall
   and by source, and every disagreement.

KernelBench's code runs only in the child processes (``kernelbench_agreement_child.py``, which imports it
from ``--kernelbench``'s ``src/``; none of it is copied). What its evaluation needs (torch, numpy, pydantic,
requests, tqdm, and ninja for builds) is checked before anything runs; the LLM clients its package imports
are stood in for (see the child's docstring).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from kernelbench_agreement_table import (  # noqa: E402
    BACKENDS,
    PRECISIONS,
    AgreementInputError,
    Entry,
    classify_kernelbench,
    classify_kforge,
    join,
    read_jsonl,
    read_manifest,
    render_csv,
    render_markdown,
    render_text,
    summarize,
    summary_lines,
    write_kforge_manifest,
)

STEPS = ("build", "kforge", "kernelbench", "report")
#: Modules KernelBench's eval.py, timing.py and utils.py import that evaluation needs.
NEEDED = ("torch", "numpy", "pydantic", "requests", "tqdm")
CHILD = HERE / "kernelbench_agreement_child.py"
BUILDS, KB_ROWS, KFORGE_ROWS = "kernelbench_builds.jsonl", "kernelbench_eval.jsonl", "kforge_eval.jsonl"
RUN_FILE = "agreement_run.json"  # what an --out folder was made at, so a rerun cannot mix precisions


class Deadline:
    """Seconds left of ``--deadline`` (None: no limit)."""

    def __init__(self, seconds: float | None):
        self.end = time.monotonic() + seconds if seconds else None

    def left(self) -> float:
        return float("inf") if self.end is None else self.end - time.monotonic()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


Job = tuple[str, list[str], Path, Path]  # key, argv, result file, log file


def run_children(jobs: list[Job], parallel: int, timeout: float, deadline: Deadline,
                 on_done: Callable[[str, dict[str, Any], float], Job | None],
                 on_kill: Callable[[str], None] = lambda key: None) -> list[str]:
    """Run jobs ``parallel`` at a time, each in a process of its own session (so a kill takes its compilers).

    A job's record is its result file's JSON with ``status: result``/``none`` as the child wrote it, or
    ``timeout`` (killed after ``timeout`` s) or ``crash`` (exited without a result); ``on_done`` sees it
    and may return a job to run again. Jobs still running at the deadline are killed and not recorded;
    returns the keys left undone.
    """
    queue, running, cut = list(jobs), {}, []
    while queue or running:
        while queue and len(running) < parallel and deadline.left() > 0:
            key, argv, result, log = queue.pop(0)
            result.unlink(missing_ok=True)
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "wb") as fh:
                proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            running[key] = (proc, time.monotonic(), result, log)
        if not running:
            break
        time.sleep(0.2)
        for key, (proc, start, result, log) in list(running.items()):
            elapsed = time.monotonic() - start
            if proc.poll() is None and deadline.left() <= 0:
                _kill_group(proc)
                on_kill(key)
                del running[key]
                cut.append(key)
                continue
            if proc.poll() is None and elapsed > timeout:
                _kill_group(proc)
                on_kill(key)
                rec = {"status": "timeout", "error": f"killed after {timeout:.0f} s"}
            elif proc.poll() is None:
                continue
            else:
                try:
                    rec = json.loads(result.read_text())
                    rec.setdefault("status", "result")
                except (OSError, json.JSONDecodeError):
                    tail = log.read_text(errors="replace")[-1500:] if log.is_file() else ""
                    rec = {"status": "crash", "error": f"exit status {proc.returncode}; log tail: {tail}"}
            del running[key]
            again = on_done(key, rec, elapsed)
            if again is not None:
                queue.insert(0, again)
    return cut + [j[0] for j in queue] + list(running)


def _append(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(row, default=str) + "\n")


def _make_job(kind: str, args, e: Entry, suffix: str = "") -> Job:
    """A child's job file (in ``OUT/work/KEY``) and the command that runs it."""
    out = Path(args.out)
    work = out / "work" / e.key
    work.mkdir(parents=True, exist_ok=True)
    job_file, result = work / f"{kind}.job.json", work / f"{kind}.result.json"
    job_file.write_text(json.dumps(_job(args, e)))
    argv = [sys.executable, str(CHILD), "build" if kind == "build" else "eval", str(job_file), str(result)]
    return e.key, argv, result, out / "logs" / f"{e.key}.{kind}{suffix}.log"


def _job(args, e: Entry) -> dict[str, Any]:
    return {"kernelbench": str(Path(args.kernelbench).resolve()), "problem": str(e.problem),
            "candidate": str(e.candidate), "build_dir": str(Path(args.out).resolve() / "build" / e.key),
            "gpu_arch": args.gpu_arch, "seed": 42, "trials": args.trials, "timed": args.timed,
            "warm_init": not args.no_warm_init, "backend": e.backend, "precision": args.precision}


def _clear_locks(build_dir: Path) -> None:
    """A killed build leaves torch's ``lock`` file behind, and the next build would wait on it forever."""
    for lock in build_dir.rglob("lock") if build_dir.is_dir() else []:
        lock.unlink(missing_ok=True)


def step_children(kind: str, args, entries: list[Entry], deadline: Deadline) -> list[str]:
    """GPU machine only: the ``build`` (parallel) or ``kernelbench`` (one at a time) step, resumed."""
    out = Path(args.out)
    rows_file = out / (BUILDS if kind == "build" else KB_ROWS)
    if kind == "build":  # only load_inline extensions are precompiled; Triton compiles at first launch
        entries = [e for e in entries if e.backend == "cuda"]
    done = read_jsonl(rows_file, "key")
    todo = [e for e in entries if e.key not in done]
    by_key, jobs, retried = {e.key: e for e in entries}, [], set()
    print(f"[{kind}] {len(todo)} to do, {len(entries) - len(todo)} already recorded in {rows_file}", flush=True)
    for e in todo:
        _clear_locks(out / "build" / e.key)
        jobs.append(_make_job(kind, args, e))
    count = [len(entries) - len(todo)]

    def on_done(key: str, rec: dict[str, Any], elapsed: float) -> Job | None:
        e = by_key[key]
        if kind == "kernelbench" and rec.get("status") == "none" and key not in retried:
            retried.add(key)  # KernelBench asks for a retry after a lock-file error
            _clear_locks(out / "build" / key)
            return _make_job(kind, args, e, ".retry")
        count[0] += 1
        _append(rows_file, {"key": key, "candidate": e.name, "problem": str(e.problem),
                            "wall_s": round(elapsed, 1), **rec})
        if kind == "build":
            if not rec.get("compiled"):  # as KernelBench's batch_compile: a failed build starts clean next time
                shutil.rmtree(out / "build" / key, ignore_errors=True)
            what = ("compiled" if rec.get("compiled")
                    else f"not compiled ({rec.get('status')}): {str(rec.get('error'))[:160]}")
            what += f"; ModelNew built: {rec['warm_init'][:120]}" if rec.get("warm_init") else ""
        else:
            v = classify_kernelbench(rec)
            what = (v.label + (f" {v.speedup:.2f}x" if v.speedup else "")
                    + (f": {v.message[:160]}" if not v.correct else ""))
        print(f"[{kind} {count[0]}/{len(entries)}] {e.name}: {' '.join(what.split())} ({elapsed:.1f} s)", flush=True)
        return None

    def on_kill(key: str) -> None:
        if kind == "build":
            shutil.rmtree(out / "build" / key, ignore_errors=True)
        else:
            _clear_locks(out / "build" / key)

    timeout = args.build_timeout if kind == "build" else args.timeout
    left = run_children(jobs, args.jobs if kind == "build" else args.eval_jobs, timeout, deadline, on_done, on_kill)
    if left:
        print(f"[{kind}] deadline: {len(left)} left for the next run", flush=True)
    return left


def kforge_command(args, manifest: Path, rows: Path) -> list[str]:
    """``kforge eval`` from this checkout (``python -m kforge.cli``), under KernelBench's rules.

    The manifest names each row's backend (``--backend`` covers rows without one); ``--precision`` is
    passed unless it is fp32, kforge's own default, so an fp32 run needs no kforge that knows the option.
    """
    precision = [] if args.precision == "fp32" else ["--precision", args.precision]
    return [sys.executable, "-m", "kforge.cli", "eval", "--manifest", str(manifest), "--out", str(rows),
            "--rules", "kernelbench", "--backend", args.backend, *precision, "--size", "default",
            "--trials", str(args.trials), "--jobs", str(args.jobs), "--no-progress", *shlex.split(args.kforge_args)]


def _stop(proc: subprocess.Popen) -> None:
    """Interrupt kforge eval (it keeps the rows it wrote), then end its whole session if it lingers."""
    for sig, wait in ((signal.SIGINT, 30), (signal.SIGTERM, 10)):
        try:
            os.killpg(proc.pid, sig) if sig == signal.SIGTERM else proc.send_signal(sig)
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return
    _kill_group(proc)


def step_kforge(args, entries: list[Entry], deadline: Deadline) -> bool:
    """GPU machine only: ``kforge eval`` over the entries not yet in its rows; a line per new row. True when done."""
    out = Path(args.out)
    rows_file = out / KFORGE_ROWS
    done = {k for k, r in read_jsonl(rows_file, "candidate").items() if r.get("state") != "error"}
    todo = [e for e in entries if str(e.candidate) not in done]
    print(f"[kforge] {len(todo)} to do, {len(entries) - len(todo)} already in {rows_file}", flush=True)
    if not todo:
        return True
    cmd = kforge_command(args, write_kforge_manifest(entries, out / "kforge_manifest.csv"), rows_file)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    print(f"[kforge] {shlex.join(cmd)}", flush=True)
    log = out / "logs" / "kforge_eval.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    names = {str(e.candidate): e.name for e in entries}
    seen = set(done)  # rows that say "error" are tried again by kforge eval, and shown when they are
    with open(log, "ab") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        while True:
            finished = proc.poll() is not None
            for cand, row in read_jsonl(rows_file, "candidate").items():
                if cand in names and cand not in seen:
                    seen.add(cand)
                    v = classify_kforge(row)
                    speed = f" {v.speedup:.2f}x" if v.speedup else ""
                    print(f"[kforge {len(seen & set(names))}/{len(entries)}] {names[cand]}: {v.state}{speed}"
                          f" (kforge rules: {v.kforge_state or '?'})", flush=True)
            if finished:
                break
            if deadline.left() <= 0:
                print("[kforge] deadline: interrupting kforge eval (rows written so far are kept)", flush=True)
                _stop(proc)
                return False
            time.sleep(1.0)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        print(f"[kforge] kforge eval exited with status {proc.returncode}; the end of {log}:\n{tail}", flush=True)
        if proc.returncode == 2:
            raise AgreementInputError("kforge eval refused its arguments (above); does this checkout's kforge "
                                      "have `kforge eval --rules`" + ("" if args.precision == "fp32" else
                                                                      " and `--precision`") + "?")
        return False
    return True


def step_report(args, entries: list[Entry]) -> int:
    out = Path(args.out)
    rows = join(entries, read_jsonl(out / KB_ROWS, "key"), read_jsonl(out / KFORGE_ROWS, "candidate"))
    s = summarize(rows, args.precision)
    print(render_text(rows))
    print("\n".join(summary_lines(s)), flush=True)
    (out / "agreement.csv").write_text(render_csv(rows, args.precision))
    (out / "agreement.md").write_text(render_markdown(rows, s))
    print(f"written: {out / 'agreement.md'}, {out / 'agreement.csv'}")
    return len(s.pending)


def missing_requirements(kernelbench: Path, steps: list[str], backends: frozenset = frozenset({"cuda"})) -> list[str]:
    """What this machine lacks for the chosen steps and the manifest's backends, each as a sentence saying how
    to get it."""
    problems = []
    if not (kernelbench / "src" / "kernelbench" / "eval.py").is_file():
        problems.append(f"{kernelbench}/src/kernelbench/eval.py is missing: --kernelbench must be a KernelBench "
                        "checkout with the src/kernelbench package layout (2025 or later)")
    if {"build", "kernelbench"} & set(steps):
        lacking = [m for m in NEEDED if importlib.util.find_spec(m) is None]
        if lacking:
            problems.append(f"KernelBench's eval needs {', '.join(lacking)}: pip install {' '.join(lacking)}")
        if "cuda" in backends and shutil.which("ninja") is None and importlib.util.find_spec("ninja") is None:
            problems.append("torch's load_inline needs ninja: pip install ninja")
        if "triton" in backends and importlib.util.find_spec("triton") is None:
            problems.append("the manifest's Triton candidates need triton: pip install triton")
    if {"kforge", "kernelbench"} & set(steps) and shutil.which("nvidia-smi") is None:
        problems.append("the kforge and kernelbench steps run on an NVIDIA GPU (no nvidia-smi here); "
                        "--steps report runs anywhere")
    return problems


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout (its src/ is imported)")
    ap.add_argument("--manifest", required=True, help="CSV or JSONL of problem,candidate[,source]")
    ap.add_argument("--out", required=True, help="folder for records, builds, logs and the table (resumable)")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                    help="parallel builds (both harnesses)")
    ap.add_argument("--eval-jobs", type=int, default=1,
                    help="KernelBench evaluations at a time on the GPU (1, as its one-GPU batch; more overlap "
                         "the builds some do at eval time but disturb the timings)")
    ap.add_argument("--trials", type=int, default=5, help="correctness trials (KernelBench's num_correct_trials)")
    ap.add_argument("--timed", type=int, default=100, help="timed trials (KernelBench's num_perf_trials)")
    ap.add_argument("--precision", choices=PRECISIONS, default="fp32",
                    help="what both harnesses judge at: KernelBench's precision (inputs and weights cast, its "
                         "tolerance: 1e-4 for fp32, 1e-2 else) and `kforge eval --precision` (default fp32)")
    ap.add_argument("--backend", choices=BACKENDS, default="cuda",
                    help="the backend of manifest rows without a backend column (default cuda)")
    ap.add_argument("--gpu-arch", nargs="+", default=["Hopper"],
                    help="KernelBench's set_gpu_arch names (H100/H200: Hopper)")
    ap.add_argument("--timeout", type=float, default=180,
                    help="seconds per KernelBench evaluation (its EvalConfig.timeout)")
    ap.add_argument("--build-timeout", type=float, default=600, help="seconds per KernelBench precompile")
    ap.add_argument("--deadline", type=float, default=None,
                    help="stop (and cut off running work) after this many seconds; rerun to go on")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    ap.add_argument("--kforge-args", default="--no-compile-ref", help="extra `kforge eval` arguments")
    ap.add_argument("--no-warm-init", action="store_true", help="precompile only what importing the candidate builds")
    args = ap.parse_args(argv)
    args.steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = set(args.steps) - set(STEPS)
    if unknown:
        ap.error(f"unknown steps {', '.join(sorted(unknown))} (choose from {', '.join(STEPS)})")
    return args


def claim_out(out: Path, precision: str) -> None:
    """Record the precision an --out folder holds verdicts at: resuming at another would mix two in one table."""
    run_file = out / RUN_FILE
    if run_file.is_file():
        try:
            made_at = json.loads(run_file.read_text()).get("precision")
        except (OSError, json.JSONDecodeError, AttributeError):
            made_at = None
        if made_at and made_at != precision:
            raise AgreementInputError(f"{out} holds verdicts at precision {made_at}, not {precision}: "
                                      f"give another --out (or --precision {made_at} to go on with it)")
    out.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps({"precision": precision}) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    deadline = Deadline(args.deadline)
    try:
        entries = read_manifest(args.manifest, args.kernelbench, args.backend)
        lacking = missing_requirements(Path(args.kernelbench), args.steps, frozenset(e.backend for e in entries))
        if lacking:
            raise AgreementInputError("cannot run here:\n  " + "\n  ".join(lacking))
        claim_out(Path(args.out), args.precision)
        backends = ", ".join(f"{sum(e.backend == b for e in entries)} {b}" for b in BACKENDS)
        print(f"{len(entries)} candidates ({backends}) from {args.manifest} at {args.precision}; "
              f"steps {', '.join(args.steps)}; out {args.out}", flush=True)
        finished = True
        if "build" in args.steps:
            finished &= not step_children("build", args, entries, deadline)
        if "kforge" in args.steps and deadline.left() > 0:
            finished &= step_kforge(args, entries, deadline)
        if "kernelbench" in args.steps and deadline.left() > 0:
            finished &= not step_children("kernelbench", args, entries, deadline)
        pending = step_report(args, entries) if "report" in args.steps else 0
    except AgreementInputError as exc:
        print(f"kernelbench_agreement: {exc}", file=sys.stderr)
        return 2
    done = finished and deadline.left() > 0 and not pending
    print("all done" if done else "not finished: run the same command again to go on", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

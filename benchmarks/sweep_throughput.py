"""Sweep throughput: problems per hour and device busy fraction, by device count and loop concurrency.

    python benchmarks/sweep_throughput.py --backend cpu --latency 2 --configs 1x1,1x4
    python benchmarks/sweep_throughput.py --backend cuda --latency 5 --configs 1x1,1x4,2x8
    python benchmarks/sweep_throughput.py --backend cuda --loop beam --iterations 7 --configs 2x1,2x2

A config ``GxC`` runs the sweep on G devices (GPUs; on the cpu backend, G CPU run slots) with C problem
loops in flight. The model is the oracle (hand-written kernels, not an LLM) with a simulated latency
per call, so the numbers show how well kforge overlaps model calls, builds and timing — not how
fast any real model is. Builds are warmed first, as they are from the second iteration of a sweep.
With ``--loop beam`` each problem is a search tree (``loop=beam``, ``--iterations`` model calls per problem)
whose children are verified concurrently, so even one problem loop in flight can keep several devices busy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_config(backend: str, devices: int, concurrency: int, latency: float, iterations: int, size: str,
               levels: str, workdir: Path, spare: bool = True, extra: tuple[str, ...] = (),
               loop: str = "iterative") -> dict:
    from hydra import compose, initialize_config_dir

    from kforge import REPO_DIR
    from kforge.job.pipeline import run
    from kforge.sandbox.gpus import detect_gpus
    from kforge.verify import WorkerPool
    overrides = [f"backend={backend}", "model=oracle", f"model.latency_s={latency}", f"loop={loop}",
                 f"loop.iterations={iterations}", f"loop.concurrency={concurrency}", f"problems.levels=[{levels}]",
                 f"problems.size={size}", f"tracking.uri=sqlite:///{workdir}/mlflow.db",
                 f"tracking.experiment=throughput-{devices}x{concurrency}", "resume=false", *extra]
    with initialize_config_dir(config_dir=str(REPO_DIR / "conf"), version_base="1.3"):
        cfg = compose("synthesize", overrides=overrides)
    if backend == "cpu":
        pool = WorkerPool(gpus=[], cpu_workers=devices)
    else:
        gpus = detect_gpus()
        if len(gpus) < devices:
            raise SystemExit(f"asked for {devices} GPUs, {len(gpus)} visible")
        pool = WorkerPool(gpus=gpus[:devices], spare=spare)
    with pool:
        # Steady-state throughput: workers started and devices probed before the clock (a job pays this
        # once, ~10 s, however many problems follow).
        from kforge.backends import get_backend
        spec = get_backend(backend).spec()
        kinds = pool.kinds_for("cuda" if backend != "cpu" else "cpu")
        pool.start(["build", *kinds])
        for kind in kinds:
            pool.device_info(kind, spec)
            pool.ceilings(kind, spec)
        # The tracking store as every sweep after its first finds it: tables made (a one-off ~1 s that the
        # 1-GPU and 2-GPU runs would otherwise both pay inside the clock, as idle devices).
        from kforge.tracking import open_client
        open_client(f"sqlite:///{workdir}/mlflow.db")
        pool.time_s.clear()
        phases, span = _book_phases(pool)
        start, cpu0 = time.monotonic(), time.process_time()
        result = run(cfg, pool=pool)
        end = time.monotonic()
        wall, host_cpu = end - start, time.process_time() - cpu0
        busy = sum(pool.busy_s.get(k, 0.0) for k in kinds)
        times = {k: dict(v) for k, v in pool.time_s.items()}
    n = len(result.results)
    records = [rec for r in result.results for rec in r.records]
    # Where an iteration's time goes: the model, the verifier (waiting for and using build and device
    # slots), the analysis; the rest is the loop itself (prompts, logging, Python in the main process).
    it = max(1, len(records))
    gpu = [t for k, t in times.items() if k != "build"]
    build = times.get("build", {})
    split = {"llm": sum(x.llm_s for x in records) / it, "verify": sum(x.verify_s for x in records) / it,
             "analysis": sum(x.analysis_s for x in records) / it, "iteration": sum(x.wall_s for x in records) / it,
             "build_wait": build.get("wait", 0.0) / it, "build_serve": build.get("serve", 0.0) / it,
             "device_wait": sum(t["wait"] for t in gpu) / it, "device_serve": sum(t["serve"] for t in gpu) / it,
             "worker_start": sum(t["start"] for t in times.values()) / it}
    # The verifier's own sections (pool requests with their waits, and the host work around them).
    split.update({f"verifier_{k}": v / it for k, v in result.extra.get("verifier_time_s", {}).items()})
    runs = max(1, phases.pop("requests", 0))
    # A run request's time on its device slot: the worker's phases, and the rest (fork, exit, the reply).
    served = sum(t["serve"] for t in gpu) / runs if gpu else 0.0
    per_run = {k: v / runs for k, v in sorted(phases.items(), key=lambda kv: -kv[1])}
    per_run["outside phases"] = served - sum(per_run.values())
    return {"config": f"{devices}x{concurrency}", "devices": devices, "concurrency": concurrency, "problems": n,
            "iterations": len(records), "wall_s": wall, "problems_per_hour": n / wall * 3600,
            "busy_fraction": busy / (wall * devices), "host_cpu_fraction": host_cpu / wall,
            "lead_s": span.get("first", end) - start, "drain_s": end - span.get("last", end),
            "correct": sum(r.correct for r in result.results),
            "per_iteration_s": split, "per_run_s": per_run}


def _book_phases(pool) -> tuple[dict, dict]:
    """Sum, over the pool's run requests, the worker's own phase times (setup, correctness, timing ...);
    and when the first run request went out and the last one came back (the sweep's ends, when devices idle
    for want of work)."""
    import threading
    totals: dict = {}
    span: dict = {}
    lock, request = threading.Lock(), pool.request

    def booking(kind, payload, files, timeout):
        sent = time.monotonic()
        reply = request(kind, payload, files, timeout)
        if payload.KIND == "run":
            with lock:
                span["first"] = min(span.get("first", sent), sent)
                span["last"] = max(span.get("last", 0.0), time.monotonic())
                totals["requests"] = totals.get("requests", 0) + 1
                for name, sec in (reply.result.phases if reply.result else {}).items():
                    totals[name] = totals.get(name, 0.0) + sec
        return reply

    pool.request = booking
    return totals, span


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--latency", type=float, default=2.0, help="simulated seconds per model call")
    ap.add_argument("--configs", default="1x1,1x4", help="comma-separated DEVICESxCONCURRENCY")
    ap.add_argument("--iterations", type=int, default=3, help="iterations per problem (beam: model calls)")
    ap.add_argument("--loop", choices=["iterative", "beam"], default="iterative",
                    help="the chain, or beam search (set width/beam/depth with --override loop.width=3 ...)")
    ap.add_argument("--levels", default="1", help="built-in levels, e.g. 1 or 1,2")
    ap.add_argument("--size", default=None, help="problem size preset (default: cpu on cpu, gpu on GPUs)")
    ap.add_argument("--spare", action=argparse.BooleanOptionalAction, default=True,
                    help="GPU workers keep a spare child with its CUDA context made (workers.spare)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a Hydra override for every config (repeatable), e.g. verify.timing.min_trials=100")
    args = ap.parse_args()
    extra = tuple(args.override)
    size = args.size or ("cpu" if args.backend == "cpu" else "gpu")
    work = Path(tempfile.mkdtemp(prefix="kforge-throughput-"))
    print("warming the build cache ...", flush=True)
    run_config(args.backend, 1, 4, 0.0, 1, size, args.levels, work / "warm", args.spare, extra, args.loop)
    rows = []
    for spec in args.configs.split(","):
        g, c = (int(x) for x in spec.lower().split("x"))
        rows.append(run_config(args.backend, g, c, args.latency, args.iterations, size, args.levels, work / spec,
                               args.spare, extra, args.loop))
        print(rows[-1], flush=True)
    print(f"\nsweep throughput: backend {args.backend}, loop {args.loop}, {args.iterations} iterations per problem, "
          f"simulated model "
          f"latency {args.latency:g} s per call (oracle, not an LLM), spare children {'on' if args.spare else 'off'}"
          + (f", overrides {' '.join(extra)}" if extra else "") + "\n")
    # Host CPU: this process's CPU time over the wall (all its threads; Python runs one at a time, so near
    # 100% means the loops' own Python work, not the devices, sets the pace).
    # First run / after last run: seconds from the start to the first device request, and from the last
    # device reply to the end (the first model calls, the last problems' logging); every device idles then.
    print("| devices x loops | problems | wall s | problems/hour | device busy | host CPU | first run s | "
          "after last run s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['config']} | {r['problems']} | {r['wall_s']:.1f} | {r['problems_per_hour']:.0f} | "
              f"{100 * r['busy_fraction']:.0f}% | {100 * r['host_cpu_fraction']:.0f}% | {r['lead_s']:.2f} | "
              f"{r['drain_s']:.2f} |")
    print("\nseconds per iteration (each total over all loops / iterations; loops overlap). verify = build wait + "
          "build + device wait + device run + the verifier's own work; verifier_* split verify by section:\n")
    keys = ["iteration", "llm", "verify", "build_wait", "build_serve", "device_wait", "device_serve", "worker_start",
            "analysis", "verifier_checks", "verifier_build", "verifier_run", "verifier_after"]
    print("| devices x loops | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for r in rows:
        print(f"| {r['config']} | " + " | ".join(f"{r['per_iteration_s'].get(k, 0.0):.2f}" for k in keys) + " |")
    print("\nseconds per run request on its device slot, by the worker's phases (a slowdown with more devices "
          "shows where they contend):\n")
    names = list(dict.fromkeys(k for r in rows for k in r["per_run_s"]))
    print("| devices x loops | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for r in rows:
        print(f"| {r['config']} | " + " | ".join(f"{r['per_run_s'].get(k, 0.0):.3f}" for k in names) + " |")


if __name__ == "__main__":
    main()

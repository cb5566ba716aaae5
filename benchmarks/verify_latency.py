"""Verification latency, timing repeatability and agreement with Nsight Compute, on a GPU.

    python benchmarks/verify_latency.py [--backends cuda,triton] [--problems 1_ReLU,2_Softmax,...] [--json out.json]

For each built-in problem that has a hand-written (oracle) kernel for the backend, at its GPU size:
  cold     a full verification (build, 5 correctness trials, timing vs eager and torch.compile) of a
           source never built before (its build-cache entry, or Triton's kernel cache, removed first);
           the torch.compile reference's median comes from the problem's first verification, as in a
           sweep (verify.compile_ref_reuse)
  cached   the same verification again, the build cache warm
  re-timed the same with the compile reference compiled and timed again (compile_ref_reuse=false)
  repeat   median(run 3) / median(run 2) of the candidate's timing: the harness's repeatability
  ncu      the candidate's per-call GPU time from `ncu --clock-control none --metrics gpu__time_duration.sum`,
           against the verifier's event-timed median (agreement = |ncu - events| / events)
  attrib   what measuring whose code did the work (one profiled and one traced correctness trial, two of
           the trials asked for) adds to a cached verification: cached verifications with it on and off,
           alternated, --pairs times each; "wall" compares their wall times, "trials" the time their
           correctness trials took inside the worker (the same trials, measured or plain), which the
           timing phase's adaptive rounds do not blur; both as a share of the verification with it off
The machine-wide caches (the precompiled torch header, inductor's cache for the torch.compile
reference) are warmed once first, as they are after the first problem of any sweep.

With ``--kernelbench DIR`` (a KernelBench checkout with ``src/kernelbench/eval.py``), the one-shot path is also
measured, kforge and KernelBench side by side, each verification a fresh process as a user runs it:
  kforge       ``kforge verify PROBLEM CANDIDATE --json -v`` (its workers start, verify, and exit), cold (a
               fresh kforge cache: the torch header, the build, the audit and the compile reference all made
               anew), cached (the same command again), and cached with ``--resident`` (workers left by the
               call before: no torch import, the CUDA context made)
  KernelBench  its ``eval_kernel_against_ref`` (5 correctness trials, 100 timed, seed 42) in a fresh process
               (benchmarks/kernelbench_agreement_child.py), cold (a fresh build directory) and warm (the same
               again); CUDA candidates only (its child runs the cuda backend)
``--oneshot-only`` measures only that.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kforge.backends import get_backend  # noqa: E402
from kforge.problems import builtin_solution_path, load_builtin  # noqa: E402
from kforge.profile import ncu  # noqa: E402
from kforge.profile.protocol import ProfileRequest  # noqa: E402
from kforge.sandbox.gpus import arch_of  # noqa: E402
from kforge.verify import Verifier, VerifyConfig, WorkerPool  # noqa: E402


def clear_build(verdict, triton_cache: Path) -> None:
    for d in (verdict.build or {}).get("built", []) + (verdict.build or {}).get("cached", []):
        shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(triton_cache, ignore_errors=True)
    triton_cache.mkdir(parents=True, exist_ok=True)


def pool_delta(pool: WorkerPool, before: dict) -> dict:
    """Seconds per slot kind and phase (wait, serve, start) spent since ``before`` (a copy of pool.time_s)."""
    out = {}
    for kind, t in pool.time_s.items():
        d = {k: round(v - before.get(kind, {}).get(k, 0.0), 3) for k, v in t.items()}
        if any(d.values()):
            out[kind] = d
    return out


def timed(verifier: Verifier, pool: WorkerPool, *args, **kwargs):
    before = {k: dict(v) for k, v in pool.time_s.items()}
    verdict = verifier.verify(*args, **kwargs)
    return verdict, pool_delta(pool, before)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="cuda,triton")
    ap.add_argument("--problems", default="", help="comma-separated built-in names (default: all with oracles)")
    ap.add_argument("--json", help="write the raw numbers here")
    ap.add_argument("--no-ncu", action="store_true")
    ap.add_argument("--size", default="gpu", help="problem size preset (default gpu; cpu for the cpu backend)")
    ap.add_argument("--skip", default="", help="comma list out of cold,retimed,attribution to leave out")
    ap.add_argument("--pairs", type=int, default=3, help="attribution on/off verification pairs per problem")
    ap.add_argument("--kernelbench", metavar="DIR", help="a KernelBench checkout: also time the one-shot path, "
                    "kforge's and KernelBench's, side by side")
    ap.add_argument("--oneshot-only", action="store_true", help="with --kernelbench: only the one-shot comparison")
    ap.add_argument("--gpu-arch", default="Hopper", help="KernelBench's set_gpu_arch name (H100/H200: Hopper)")
    ap.add_argument("--repeats", type=int, default=2, help="cached/warm one-shot runs per side (the median is shown)")
    args = ap.parse_args()
    if args.kernelbench and not (Path(args.kernelbench) / "src" / "kernelbench" / "eval.py").is_file():
        ap.error(f"{args.kernelbench}/src/kernelbench/eval.py is missing: --kernelbench must be a KernelBench checkout")
    if args.oneshot_only:
        if not args.kernelbench:
            ap.error("--oneshot-only needs --kernelbench DIR")
        oneshot_rows = oneshot(args, Path(tempfile.mkdtemp(prefix="kforge-oneshot-")))
        print_oneshot(oneshot_rows)
        if args.json:
            Path(args.json).write_text(json.dumps({"oneshot": oneshot_rows}, indent=1))
        return

    work = Path(tempfile.mkdtemp(prefix="kforge-latency-"))
    triton_cache = work / "triton-cache"
    triton_cache.mkdir()
    os.environ["TRITON_CACHE_DIR"] = str(triton_cache)
    rows = []
    skip = set(filter(None, args.skip.split(",")))
    # Cold builds need a build cache of their own; without them the machine's (KFORGE_CACHE_DIR) serves,
    # so kernels built before (`kforge build --oracle`) are not built again.
    with WorkerPool(build_cache=None if "cold" in skip else work / "cache") as pool:
        verifier = Verifier(VerifyConfig(), pool=pool)
        names = [n for n in args.problems.split(",") if n]
        problems = load_builtin(names=names or None, size=args.size)
        for bname in args.backends.split(","):
            backend = get_backend(bname)
            kind = pool.kinds_for(backend.device)[0]
            info = pool.device_info(kind, backend.spec())
            # Warm the machine-wide cache once (the precompiled header); each problem's first verification
            # below then warms inductor's cache for its torch.compile reference.
            t0 = time.monotonic()
            warm = verifier.verify(backend.example_problem(), backend.example()[1], backend)
            print(f"[{bname}] warm-up on {info.device}: {warm.state.value}, {time.monotonic() - t0:.1f} s; "
                  f"workers preload {pool.preloads()}", flush=True)
            for p in problems:
                sol = builtin_solution_path(p, bname)
                if sol is None:
                    continue
                source = sol.read_text()
                first = verifier.verify(p, source, backend)
                row = {"backend": bname, "problem": p.key, "state": first.state.value, "device": info["device"]}
                if "cold" not in skip:
                    clear_build(first, triton_cache)
                    # The pool's split (waiting for a slot, serving, starting a worker) shows time outside the phases.
                    cold, cold_pool = timed(verifier, pool, p, source, backend)
                    row.update(state=cold.state.value, cold_s=cold.wall_s, cold_pool=cold_pool,
                               cold_build_s=(cold.build or {}).get("seconds"), cold_phases=cold.phases)
                else:
                    cold = first
                cached, cached_pool = timed(verifier, pool, p, source, backend)
                again = verifier.verify(p, source, backend)
                row.update(cached_s=cached.wall_s, phases=cached.phases, cached_pool=cached_pool,
                           cached_build_s=(cached.build or {}).get("seconds"), kernel_share=cached.kernel_share)
                if "retimed" not in skip:
                    # Re-timing the torch.compile reference costs a compile per verification, even from inductor's cache.
                    retimed = verifier.verify(p, source, backend, config=VerifyConfig(compile_ref_reuse=False))
                    row["cached_retimed_compile_ref_s"] = retimed.wall_s
                if "attribution" not in skip:
                    on, off, trials_on, trials_off = [], [], [], []
                    for _ in range(args.pairs):
                        v = verifier.verify(p, source, backend, config=VerifyConfig(attribution=False))
                        off.append(v.wall_s)
                        trials_off.append(v.phases.get("correctness", 0.0))
                        v = verifier.verify(p, source, backend)
                        on.append(v.wall_s)
                        trials_on.append(v.phases.get("correctness", 0.0) + v.phases.get("attribution", 0.0))
                    row.update(attribution_on_s=on, attribution_off_s=off, trials_on_s=trials_on,
                               trials_off_s=trials_off, attribution_overhead=sum(on) / sum(off) - 1,
                               attribution_trials_overhead=(sum(trials_on) - sum(trials_off)) / sum(off))
                if cached.correct and again.correct:
                    row.update(median_ms=cached.runtime.median_ms, host_median_ms=cached.runtime.host_median_ms,
                               n=cached.runtime.n, repeat=again.runtime.median_ms / cached.runtime.median_ms,
                               speedup_eager=cached.speedup_eager, speedup_compile=cached.speedup_compile)
                    if not args.no_ncu and backend.device == "cuda":
                        try:
                            rep = ncu.profile(work / "ncu" / f"{bname}-{p.name}",
                                              ProfileRequest(problem=p, backend=backend.spec(),
                                                             config=VerifyConfig().to_dict(),
                                                             cache_dir=pool.build_cache,
                                                             arch=arch_of(info.capability)),
                                              {"problem.py": p.source, "candidate.py": source}, [ncu.DURATION],
                                              gpu=int(kind.split(":")[1]), iterations=5)
                            per_call = ncu.per_call_duration_ms(rep)
                            row.update(ncu_ms=statistics.median(per_call), ncu_s=rep.seconds,
                                       agreement=abs(statistics.median(per_call) - cached.runtime.median_ms)
                                       / cached.runtime.median_ms)
                        except ncu.NcuError as exc:
                            row["ncu_error"] = str(exc)[-300:]
                else:
                    row["message"] = cold.message
                rows.append(row)
                print(json.dumps(row), flush=True)
    print_table(rows)
    oneshot_rows = oneshot(args, work / "oneshot") if args.kernelbench else []
    if oneshot_rows:
        print_oneshot(oneshot_rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "oneshot": oneshot_rows} if oneshot_rows else rows,
                                              indent=1))


def _timed_process(argv: list[str], env: dict[str, str] | None = None, timeout: float = 1800):
    """(wall seconds, completed process) of one fresh process, as a user's one-shot command runs."""
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    return time.monotonic() - t0, proc


def _kforge_oneshot(problem: Path, cand: Path, backend: str, size: str, cache: Path,
                    *extra: str) -> tuple[float, dict]:
    env = dict(os.environ, KFORGE_CACHE_DIR=str(cache))
    seconds, proc = _timed_process([sys.executable, "-m", "kforge.cli", "verify", str(problem), str(cand),
                                    "--backend", backend, "--size", size, "--json", "-v", *extra], env)
    try:
        verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        verdict = {"state": "error", "message": (proc.stderr or proc.stdout)[-500:]}
    verdict["where"] = proc.stderr[proc.stderr.find("where the"):] if "where the" in proc.stderr else ""
    return seconds, verdict


def _kernelbench_oneshot(args, problem: Path, cand: Path, build: Path, out: Path) -> tuple[float, dict]:
    job = {"kernelbench": str(Path(args.kernelbench).resolve()), "problem": str(problem), "candidate": str(cand),
           "build_dir": str(build), "gpu_arch": [args.gpu_arch], "seed": 42, "trials": 5, "timed": 100}
    job_file, result = out / "kb.job.json", out / "kb.result.json"
    job_file.write_text(json.dumps(job))
    result.unlink(missing_ok=True)
    child = Path(__file__).resolve().parent / "kernelbench_agreement_child.py"
    seconds, proc = _timed_process([sys.executable, str(child), "eval", str(job_file), str(result)])
    rec = json.loads(result.read_text()) if result.is_file() else {"error": (proc.stderr or proc.stdout)[-500:]}
    return seconds, rec


def oneshot(args, work: Path) -> list[dict]:
    """One fresh process per verification, kforge's CLI and KernelBench's harness, cold and cached/warm."""
    rows = []
    names = [n for n in args.problems.split(",") if n]
    for bname in args.backends.split(","):
        for p in load_builtin(names=names or None, size=args.size):
            sol = builtin_solution_path(p, bname)
            if sol is None:
                continue
            here = work / bname / p.name
            here.mkdir(parents=True, exist_ok=True)
            problem, cand = here / "problem.py", here / "candidate.py"
            problem.write_text(p.source)
            cand.write_text(sol.read_text())
            row: dict = {"backend": bname, "problem": p.key}
            row["kforge_cold_s"], cold = _kforge_oneshot(problem, cand, bname, args.size, here / "kforge-cache")
            cached = [_kforge_oneshot(problem, cand, bname, args.size, here / "kforge-cache")
                      for _ in range(max(1, args.repeats))]
            row.update(kforge_state=cached[-1][1].get("state"), kforge_cold_state=cold.get("state"),
                       kforge_cached_s=statistics.median(s for s, _ in cached),
                       kforge_cached_runs_s=[s for s, _ in cached], kforge_where=cached[-1][1]["where"])
            # With resident workers (`kforge verify --resident`): the first call leaves them, the next ones use them.
            resident = [_kforge_oneshot(problem, cand, bname, args.size, here / "kforge-cache", "--resident", "120")
                        for _ in range(1 + max(1, args.repeats))][1:]
            row.update(kforge_resident_s=statistics.median(s for s, _ in resident),
                       kforge_resident_runs_s=[s for s, _ in resident], kforge_resident_where=resident[-1][1]["where"])
            if bname == "cuda":
                row["kernelbench_cold_s"], kb = _kernelbench_oneshot(args, problem, cand, here / "kb-build", here)
                warm = [_kernelbench_oneshot(args, problem, cand, here / "kb-build", here)
                        for _ in range(max(1, args.repeats))]
                row.update(kernelbench_warm_s=statistics.median(s for s, _ in warm),
                           kernelbench_warm_runs_s=[s for s, _ in warm],
                           kernelbench_correct=warm[-1][1].get("correctness"), kernelbench_error=kb.get("error"))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def print_oneshot(rows: list[dict]) -> None:
    def f(x):
        return f"{x:.1f}" if isinstance(x, (int, float)) else "-"
    print("\n| backend | problem | kforge state | kforge cold s | kforge cached s | kforge cached, resident s | "
          "KernelBench correct | KernelBench cold s | KernelBench warm s |")
    print("|---|---|---|---:|---:|---:|---|---:|---:|")
    for r in rows:
        print(f"| {r['backend']} | {r['problem']} | {r.get('kforge_state')} | {f(r.get('kforge_cold_s'))} | "
              f"{f(r.get('kforge_cached_s'))} | {f(r.get('kforge_resident_s'))} | {r.get('kernelbench_correct', '-')} | "
              f"{f(r.get('kernelbench_cold_s'))} | {f(r.get('kernelbench_warm_s'))} |")
    for r in rows:
        for what, key in (("cached", "kforge_where"), ("cached, resident workers", "kforge_resident_where")):
            if r.get(key):
                print(f"\n{r['backend']} {r['problem']}, kforge {what}:\n{r[key].rstrip()}")


def print_table(rows: list[dict]) -> None:
    def f(x, spec):
        return format(x, spec) if isinstance(x, (int, float)) else "-"
    print("\n| backend | problem | state | cold verify s | cached verify s | cached, compile ref re-timed s | median ms | "
          "repeat | ncu ms | ncu vs events | kernel share | attribution adds (wall) | attribution adds (trials) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        agree = f"{100 * r['agreement']:.1f}%" if "agreement" in r else r.get("ncu_error", "-")[:40]
        adds = f"{100 * r['attribution_overhead']:+.1f}%" if "attribution_overhead" in r else "-"
        share = f"{100 * r['attribution_trials_overhead']:+.1f}%" if "attribution_trials_overhead" in r else "-"
        print(f"| {r['backend']} | {r['problem']} | {r['state']} | {f(r.get('cold_s'), '.1f')} | "
              f"{f(r.get('cached_s'), '.2f')} | {f(r.get('cached_retimed_compile_ref_s'), '.2f')} | "
              f"{f(r.get('median_ms'), '.4f')} | {f(r.get('repeat'), '.3f')} | "
              f"{f(r.get('ncu_ms'), '.4f')} | {agree} | {f(r.get('kernel_share'), '.3f')} | {adds} | {share} |")
    for backend in sorted({r["backend"] for r in rows}):
        rs = [r for r in rows if r["backend"] == backend]
        cold = [r["cold_s"] for r in rs if "cold_s" in r]
        cached = [r["cached_s"] for r in rs]
        line = f"\n{backend}: cached median {statistics.median(cached):.2f} s over {len(rs)} problems"
        if cold:
            line += f", cold median {statistics.median(cold):.1f} s"
        on = sum(sum(r["attribution_on_s"]) for r in rs if "attribution_on_s" in r)
        off = sum(sum(r["attribution_off_s"]) for r in rs if "attribution_off_s" in r)
        trials = sum(sum(r["trials_on_s"]) - sum(r["trials_off_s"]) for r in rs if "trials_on_s" in r)
        if off:
            line += (f"; attribution adds {100 * (on / off - 1):+.1f}% to a cached verification by wall time, "
                     f"{100 * trials / off:+.1f}% by its trials' time (all problems)")
        print(line)


if __name__ == "__main__":
    main()

"""KernelBench at its own sizes: every reference verified as its own candidate, audited and timed.

    python benchmarks/kernelbench_suite.py --root ~/KernelBench --levels 1,2,3 \\
        [--baseline ~/KernelBench/results/timing/H100_Modal/baseline_time_torch.json] [--out suite.jsonl]

Each problem ``levelN/ID_Name.py`` is verified with ``class ModelNew(Model): pass`` as the candidate (so
no kernel: the kernel requirement is off, attribution is still recorded), at the file's own sizes, on
the first visible GPU: the audit (flags, FLOPs, bytes, memory), correctness trials and timing of the
eager reference with PyTorch's default numerics (``ref_ms``), in strict fp32 (``ref_strict_ms``) and of
the candidate. With ``--baseline`` (KernelBench's published ``baseline_time_torch.json``) it prints the
ratio of kforge's eager median to KernelBench's published mean per problem and per level.

Rows go to ``--out`` as they finish; a rerun with the same ``--out`` skips the problems already there,
so a run cut off by a time limit continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kforge.problems import load_directory  # noqa: E402
from kforge.verify import TimingConfig, Verifier, VerifyConfig  # noqa: E402

CONV = ("conv", "Conv")


def own_candidate(source: str) -> str:
    return source + "\n\nclass ModelNew(Model):\n    pass\n"


def published(path: str | None) -> dict[str, float]:
    """``levelN/ID_Name`` -> KernelBench's published mean eager time (ms)."""
    if not path:
        return {}
    data = json.loads(Path(path).read_text())
    return {f"{level}/{Path(name).stem}": row["mean"] for level, rows in data.items() for name, row in rows.items()}


def run(args) -> list[dict]:
    out = Path(args.out)
    done = {}
    if out.exists():
        for line in out.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["problem"]] = row
    problems = load_directory(args.root, levels=args.levels, ids=args.ids)
    cfg = VerifyConfig(trials=args.trials, require_kernel=False, compile_ref=args.compile_ref,
                       attribution=not args.no_attribution,
                       timeout_s=args.timeout, skip_timing=args.no_timing,
                       timing=TimingConfig(min_trials=args.min_trials, budget_s=args.budget))
    base = published(args.baseline)
    rows = list(done.values())
    todo = [p for p in problems if p.key not in done]
    print(f"{len(problems)} problems, {len(done)} already in {out}, {len(todo)} to run", flush=True)
    start = time.monotonic()
    with Verifier(cfg) as verifier, out.open("a") as fh:
        for i, p in enumerate(todo):
            if args.deadline and time.monotonic() - start > args.deadline:
                print(f"deadline reached after {i} problems; rerun with the same --out to continue", flush=True)
                break
            t0 = time.monotonic()
            v = verifier.verify(p, own_candidate(p.source), args.backend)
            row = {"problem": p.key, "state": v.state.value, "message": v.message[:300], "rule": v.rule,
                   "flags": v.problem_flags, "ref_ms": v.ref.median_ms if v.ref else None,
                   "ref_strict_ms": v.ref_strict.median_ms if v.ref_strict else None,
                   "cand_ms": v.runtime.median_ms if v.runtime else None, "floor_ms": v.floor_ms,
                   "published_ms": base.get(p.key), "wall_s": round(time.monotonic() - t0, 2),
                   "phases": v.phases, "notes": v.evidence.notes[-3:], "device": v.device}
            rows.append(row)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            ratio = f"{row['ref_ms'] / row['published_ms']:.2f}x" if row["ref_ms"] and row["published_ms"] else "-"
            print(f"[{i + 1}/{len(todo)}] {p.key:60} {row['state']:18} {','.join(row['flags']) or '-':22} "
                  f"eager {row['ref_ms'] or 0:9.3f} ms  vs published {ratio}  ({row['wall_s']:.1f} s)", flush=True)
    return rows


def report(rows: list[dict]) -> None:
    rows = sorted(rows, key=lambda r: (int(r["problem"].split("/")[0][5:]), int(r["problem"].split("/")[1].split("_")[0])))
    states: dict[str, int] = {}
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
    print(f"\n{len(rows)} problems: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())))
    for r in rows:
        if r["state"] != "correct":
            print(f"  not correct: {r['problem']}: {r['state']} ({r.get('rule')}) {r['message'][:160]}")
    for flag in ("stochastic", "degenerate", "launch_bound"):
        hit = [r["problem"] for r in rows if flag in r["flags"]]
        print(f"{flag} ({len(hit)}): {', '.join(hit) if len(hit) <= 40 else ', '.join(hit[:40]) + ', ...'}")
    print(f"speed of light available: {sum(1 for r in rows if r.get('floor_ms'))} of {len(rows)}")
    print("\n| level | problems timed | with a published baseline | median kforge/published | "
          "within 0.77-1.3x | worst conv |")
    print("|---|---:|---:|---:|---:|---|")
    for level in sorted({r["problem"].split("/")[0] for r in rows}):
        rs = [r for r in rows if r["problem"].startswith(level + "/") and r["ref_ms"]]
        paired = [(r, r["ref_ms"] / r["published_ms"]) for r in rs if r.get("published_ms")]
        if not paired:
            print(f"| {level} | {len(rs)} | 0 | - | - | - |")
            continue
        ratios = [x for _, x in paired]
        within = sum(1 for x in ratios if 1 / 1.3 <= x <= 1.3)
        convs = [(r, x) for r, x in paired if any(c in r["problem"] for c in CONV)]
        worst = max(convs, key=lambda rx: max(rx[1], 1 / rx[1]), default=None)
        worst_s = f"{worst[0]['problem']} {worst[1]:.2f}x" if worst else "-"
        print(f"| {level} | {len(rs)} | {len(paired)} | {statistics.median(ratios):.3f} | {within} | {worst_s} |")
    off = [(r, r["ref_ms"] / r["published_ms"]) for r in rows if r.get("ref_ms") and r.get("published_ms")
           and not 1 / 1.3 <= r["ref_ms"] / r["published_ms"] <= 1.3]
    if off:
        print("\nmore than 1.3x off the published eager time:")
        for r, x in sorted(off, key=lambda rx: -max(rx[1], 1 / rx[1])):
            print(f"  {r['problem']:60} kforge {r['ref_ms']:.3f} ms, published {r['published_ms']:.3f} ms ({x:.2f}x); "
                  f"TF32 off: {r['ref_strict_ms'] or float('nan'):.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="a KernelBench checkout (or its KernelBench/ folder)")
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--backend", default="cuda", help="cuda (default) or cpu, for trying the script on tiny problems")
    ap.add_argument("--ids", default=None, help="problem ids, e.g. 1-10,19")
    ap.add_argument("--baseline", help="KernelBench's results/timing/<GPU>/baseline_time_torch.json")
    ap.add_argument("--out", default="kernelbench_suite.jsonl")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--min-trials", type=int, default=10, help="timed rounds at least")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timing per problem at most")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--compile-ref", action="store_true", help="also time torch.compile (slow: a compile each)")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--no-attribution", action="store_true", help="leave out the profiled and traced trials")
    ap.add_argument("--deadline", type=float, default=0.0, help="stop starting problems after this many seconds")
    ap.add_argument("--report-only", action="store_true", help="print the tables for --out and stop")
    args = ap.parse_args()
    rows = [json.loads(line) for line in Path(args.out).read_text().splitlines() if line.strip()] \
        if args.report_only else run(args)
    report(rows)


if __name__ == "__main__":
    main()

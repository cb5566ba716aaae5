"""Whole-workload mode on KernelBench level 3: every reference profiled, extracted, its regions checked
against themselves and the model reassembled from them (docs/workload.md, "On a GPU").

    python benchmarks/workload_level3.py --kernelbench ~/KernelBench --backend cuda \\
        --out results/workload_level3.md [--deadline 520] [--cover 0.8] [--ids 1-10] [--batch 2]

Per model (``DIR/KernelBench/level3/*.py``, at the file's own sizes, on the first visible GPU):

1. profile it by module (`kforge.workload.profile`) and extract its regions into ``--work/<model>/``
   (`extract`), printing the coverage (the regions' share of the model's device time) and the reachable
   coverage (every module that could be a region);
2. verify each region's identity candidate (its own Model renamed ModelNew) against the region, under
   KernelBench's rules (``VerifyConfig(rules="kernelbench")``: matching outputs suffice), correctness only;
3. assemble the model from those identity candidates and verify it against the model file, likewise.

``--extract-only`` does step 1 alone for every model; later runs reuse those extractions (several with
disjoint ``--ids`` may then check regions at once: correctness only, so sharing the GPU changes no figure).
Rows go to ``--work/<model>/row.json`` as each model finishes and the table to ``--out`` (Markdown) after
each; a rerun skips finished models, so calls cut off by a time limit continue. ``--deadline`` stops
starting models after that many seconds; a model started twice without finishing is recorded as failed.
Imports only what the verifier needs (no Hydra, MLflow, pandas or matplotlib).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kforge.problems import load_directory, load_problem_file  # noqa: E402
from kforge.verify import Verifier, VerifyConfig, WorkerPool  # noqa: E402
from kforge.workload.assemble import RegionKernel, evaluate  # noqa: E402
from kforge.workload.extract import blocks, extract, identity_candidate  # noqa: E402
from kforge.workload.prepare import reusable  # noqa: E402
from kforge.workload.profile import WorkloadError, profile_model, render_table  # noqa: E402

HEAD = ("model", "regions", "coverage", "reachable", "regions correct", "reassembled", "s", "failures")


def _first_line(text: str | None) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:160]


def one_model(problem, backend: str, pool, verifier, cfg, folder: Path, args) -> dict:
    """Profile, extract, check regions and the reassembled model; a row of the table."""
    row: dict = {"model": problem.key, "regions": 0, "coverage": None, "reachable": None, "regions_ok": 0,
                 "reassembled": "-", "failures": []}
    start = time.monotonic()
    try:
        workload = reusable(folder, problem, backend)
        if workload is None:
            prof = profile_model(problem, backend, pool, iterations=args.iterations, timeout_s=args.timeout)
            (folder / "profile.txt").parent.mkdir(parents=True, exist_ok=True)
            (folder / "profile.txt").write_text(render_table(prof) + "\n")
            found, _ = blocks(prof)
            (folder / "reachable.txt").write_text(repr(sum(m.share for m in found)))
            workload = extract(prof, problem, folder, top=args.top, cover=args.cover)
        if (folder / "reachable.txt").is_file():
            row["reachable"] = float((folder / "reachable.txt").read_text())
        row["regions"], row["coverage"] = len(workload.regions), workload.coverage
        print(f"{problem.key}: {len(workload.regions)} regions cover {workload.coverage * 100:.1f}% of device time"
              + (f" (reachable {row['reachable'] * 100:.1f}%)" if row["reachable"] is not None else ""), flush=True)
        if args.extract_only:
            return row
        for s in workload.skipped:
            if s["share"] >= 0.05 and s["why"] != "not among the hottest chosen":
                row["failures"].append(f"not a region: {s['path'] or '(model)'} {s['share'] * 100:.0f}%: {s['why']}")
        kernels = {}
        for r in workload.regions:
            source = identity_candidate(workload.region_file(r).read_text())
            v = verifier.verify(workload.load_region(r), source, backend, cfg)
            if v.correct:
                row["regions_ok"] += 1
                kernels[r.name] = RegionKernel(source)
            else:
                row["failures"].append(f"region {r.name}: {v.state}: {_first_line(v.message)}")
        result = evaluate(workload, verifier, backend, kernels, config=cfg, problem=problem)
        row["reassembled"] = f"{result.state} ({len(result.replaced)}/{len(workload.regions)})"
        if not result.correct:
            row["failures"].append(f"reassembled: {result.state}: {_first_line(result.message)}")
        (folder / "assembled.py").write_text(result.source)
    except WorkloadError as exc:
        row["failures"].append(f"workload: {_first_line(str(exc))}")
    except Exception:  # noqa: BLE001 - one model's failure is a row, not the end of the run
        row["failures"].append(f"error: {_first_line(traceback.format_exc().strip().splitlines()[-1])}")
    row["s"] = round(time.monotonic() - start, 1)
    return row


def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:.0f}%"


def markdown(rows: list[dict], backend: str, batch: int | None = None) -> str:
    sizes = f", batch_size={batch}" if batch else ", the files' sizes"
    lines = [f"### Whole-workload extraction on KernelBench level 3 ({backend}{sizes})", "",
             "| " + " | ".join(HEAD) + " |", "|" + "|".join("---" for _ in HEAD) + "|"]
    for r in rows:
        fails = "; ".join(r["failures"]).replace("|", "\\|") or "-"
        lines.append(f"| {r['model']} | {r['regions']} | {_pct(r['coverage'])} | {_pct(r['reachable'])} | "
                     f"{r['regions_ok']}/{r['regions']} | {r['reassembled']} | {r['s']} | {fails} |")
    n = len(rows)
    covered = sum(1 for r in rows if (r["coverage"] or 0) >= 0.8)
    ok = sum(1 for r in rows if str(r["reassembled"]).startswith("correct"))
    regions = sum(r["regions"] for r in rows)
    lines += ["", f"{n} models: {covered} with coverage >= 80%, {sum(r['regions_ok'] for r in rows)}/{regions} "
              f"regions correct against themselves, {ok} reassembled models correct (KernelBench's rules)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout (problems in KernelBench/level3/)")
    ap.add_argument("--backend", default="cuda", help="cuda (default), triton or cpu")
    ap.add_argument("--out", default="results/workload_level3.md", help="the table (Markdown)")
    ap.add_argument("--work", help="extractions and rows (default: beside --out, <out stem>/)")
    ap.add_argument("--ids", help="level-3 problem ids, e.g. 1-10 or 3,7")
    ap.add_argument("--cover", type=float, default=0.8, help="regions until this share of the model (default 0.8)")
    ap.add_argument("--top", type=int, help="at most this many regions per model")
    ap.add_argument("--trials", type=int, default=3, help="correctness trials per verification (default 3)")
    ap.add_argument("--iterations", type=int, default=3, help="profiled forward calls (default 3)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per worker request (default 300)")
    ap.add_argument("--deadline", type=float, default=0.0, help="stop starting models after this many seconds")
    ap.add_argument("--extract-only", action="store_true",
                    help="profile and extract every model, check nothing (no rows): profiles taken one model at a "
                    "time, so that several runs with disjoint --ids can then check the regions side by side "
                    "without sharing the GPU during any profile")
    ap.add_argument("--batch", type=int, help="set batch_size to this where a model has one (a check of the "
                    "extraction on a CPU in minutes; the shares, and so the figures, are those of the files' sizes "
                    "only without it)")
    args = ap.parse_args(argv)
    root = Path(args.kernelbench).expanduser()
    problems = load_directory(root, levels=[3], ids=args.ids)
    if args.batch:
        problems = [load_problem_file(p.path, overrides={"batch_size": args.batch}, level=p.level, origin=p.origin)
                    if "batch_size" in p.constants else p for p in problems]
    if not problems:
        print(f"{root}: no level-3 problems (give a KernelBench checkout: KernelBench/level3/*.py)", file=sys.stderr)
        return 2
    out = Path(args.out)
    work = Path(args.work) if args.work else out.with_suffix("")
    cfg = VerifyConfig(rules="kernelbench", require_kernel=False, trials=args.trials, skip_timing=True,
                       compile_ref=False, timeout_s=args.timeout)
    start, rows, left = time.monotonic(), [], 0
    with WorkerPool(build_workers=1, light=True) as pool, Verifier(cfg, pool=pool) as verifier:
        for i, problem in enumerate(problems):
            folder = work / Path(problem.key).name
            folder.mkdir(parents=True, exist_ok=True)
            done = folder / "row.json"
            if done.is_file():
                rows.append(json.loads(done.read_text()))
                continue
            if args.deadline and time.monotonic() - start > args.deadline:
                left = len(problems) - i
                break
            tries = folder / "attempts"
            attempts = int(tries.read_text()) if tries.is_file() else 0
            if attempts >= 2:  # twice cut off mid-model by the caller's time limit: record it, move on
                row = {"model": problem.key, "regions": 0, "coverage": None, "reachable": None, "regions_ok": 0,
                       "reassembled": "-", "s": None, "failures": ["did not finish in two calls (time limit)"]}
            else:
                tries.write_text(str(attempts + 1))
                row = one_model(problem, args.backend, pool, verifier, cfg, folder, args)
                if args.extract_only:
                    tries.write_text(str(attempts))
                    continue
            done.write_text(json.dumps(row, indent=1))
            rows.append(row)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(markdown(rows, args.backend, args.batch))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(rows, args.backend, args.batch))
    print(markdown(rows, args.backend, args.batch))
    if left:
        print(f"deadline reached: {left} model(s) left; run the same command again to continue", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

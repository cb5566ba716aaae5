"""`kforge eval` throughput: candidates verified per minute, cold (every one built) and cached.

    python benchmarks/eval_throughput.py --backend cuda --count 120 [--jobs 16] [--keep DIR]

Makes ``--count`` candidates from the built-in suite's hand-written kernels for the backend (plus the
test candidates that build), each made distinct with a comment inside its kernel source, so that each
builds once; writes a manifest; then runs ``kforge eval --manifest`` twice as a user would, with a
fresh build cache: *cold* (every candidate compiles) and *cached* (the same files into another results
file, so nothing is resumed and every build is a cache hit). Prints a table of wall time and
candidates per minute. The problems run at their GPU size on a GPU backend, at their CPU size on cpu.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kforge.problems import builtin_solution_path, load_builtin  # noqa: E402

# A marker inside the first raw string (the kernel source): a different build-cache key per copy.
_FIRST_SOURCE = re.compile(r'(r"""|r\'\'\')')


def variants(backend: str, count: int) -> list[tuple[str, str]]:
    """(problem name, candidate text) pairs, ``count`` of them, cycling over the oracle kernels."""
    base = [(p.key, builtin_solution_path(p, backend).read_text()) for p in load_builtin()
            if builtin_solution_path(p, backend)]
    out = []
    for i in range(count):
        key, text = base[i % len(base)]
        marker = f"// kforge eval_throughput copy {i}\n" if backend != "triton" else ""
        text = _FIRST_SOURCE.sub(lambda m: m.group(1) + marker, text, count=1) if marker else \
            text + f"\n# kforge eval_throughput copy {i}\n"
        out.append((key, text))
    return out


def run(manifest: Path, out: Path, args, env: dict[str, str]) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "kforge.cli", "eval", "--manifest", str(manifest), "--out", str(out),
           "--backend", args.backend, "--jobs", str(args.jobs), "--no-progress"] + args.extra
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"kforge eval failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    print(proc.stdout.strip().splitlines()[-6] if proc.stdout.strip() else "", flush=True)
    return wall, json.loads(out.with_suffix(".summary.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--count", type=int, default=120, help="candidates (default 120)")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="build workers")
    ap.add_argument("--keep", help="work here instead of a temporary folder")
    ap.add_argument("extra", nargs="*", help="more `kforge eval` options, after --")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="kforge-eval-throughput-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (problem, text) in enumerate(variants(args.backend, args.count)):
        path = work / "candidates" / f"{i:04d}_{problem.replace('/', '_')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        rows.append({"problem": problem, "candidate": str(path)})
    manifest = work / "manifest.csv"
    with manifest.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["problem", "candidate"])
        w.writeheader()
        w.writerows(rows)
    env = dict(os.environ, KFORGE_CACHE_DIR=str(work / "cache"))  # a fresh build cache: the cold run builds all
    results = [(label, *run(manifest, work / f"{label}.jsonl", args, env)) for label in ("cold", "cached")]
    print(f"\n{args.count} candidates, backend {args.backend}, {args.jobs} build workers, {os.cpu_count()} cores")
    print("| run | wall s | candidates/min | states |")
    print("|---|---:|---:|---|")
    for label, wall, summary in results:
        states = summary["all"]["states"]
        print(f"| {label} | {wall:.1f} | {60 * args.count / wall:.1f} | "
              + ", ".join(f"{k}={v}" for k, v in sorted(states.items())) + " |")


if __name__ == "__main__":
    main()

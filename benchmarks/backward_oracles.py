"""The oracle's training-step kernels, verified in the backward mode: state and forward-plus-backward speedups.

    python benchmarks/backward_oracles.py --backend cuda            # the gpu size, on the first GPU
    python benchmarks/backward_oracles.py --backend triton --out results/backward_triton.md
    python benchmarks/backward_oracles.py --backend cpu             # the cpu size

Verifies every built-in problem that has a training-step solution for the backend
(``solutions/<backend>/backward/``) with ``verify.backward`` on, as ``kforge verify --backward`` would, and
prints a Markdown table: the state, the step's median (forward then backward) against eager and
``torch.compile`` of the same step with both speedups, the kernel share of the whole step and of the backward
alone. Each verification is timed with the verifier's own method (interleaved rounds, L2 flushed, medians).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kforge.backends import get_backend  # noqa: E402
from kforge.problems import builtin_solution_path, default_size, load_builtin  # noqa: E402
from kforge.verify import Verifier, VerifyConfig, WorkerPool  # noqa: E402


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _ms(t) -> str:
    return "-" if t is None else f"{t.median_ms:.3f}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cuda", help="cpu, cuda or triton (default cuda)")
    ap.add_argument("--size", help="size preset (default: the backend's device's)")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args(argv)
    backend = get_backend(args.backend)
    size = args.size or default_size(backend.device)
    problems = [p for p in load_builtin(size=size) if builtin_solution_path(p, backend.name, backward=True)]
    cfg = VerifyConfig(trials=args.trials, backward=True)
    rows = ["| problem | state | step ms | eager ms | compile ms | vs eager | vs compile | kernel share | "
            "backward share |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    device = ""
    started = time.monotonic()
    with WorkerPool() as pool, Verifier(cfg, pool=pool) as verifier:
        for p in problems:
            code = builtin_solution_path(p, backend.name, backward=True).read_text()
            v = verifier.verify(p, code, backend)
            device = device or v.device
            a = v.attribution
            rows.append(f"| {p.key} | {v.state.value} | {_ms(v.runtime)} | {_ms(v.ref)} | {_ms(v.compile_ref)} | "
                        f"{_x(v.speedup_eager)} | {_x(v.speedup_compile)} | {_pct(a.kernel_share if a else None)} | "
                        f"{_pct(a.backward_share if a else None)} |")
            print(rows[-1], flush=True)
            if not v.correct:
                print(v.summary(), file=sys.stderr)
    table = (f"Training steps (forward then backward) of the {backend.name} oracle at the {size} size on {device}, "
             f"{time.monotonic() - started:.0f} s in all:\n\n" + "\n".join(rows) + "\n")
    print("\n" + table)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

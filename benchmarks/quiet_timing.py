"""Does a process starting up on the same GPU move a timed kernel? What the quiet lock guards against.

    python benchmarks/quiet_timing.py [--seconds 20] [--gap 0.05]

One process times kernels the way the verifier's clock does (L2 flushed, CUDA events around the call, a
full synchronize after) again and again. Meanwhile this process keeps forking fresh ones onto the same
GPU, one at a time, the way a zygote forks its spare: each makes its CUDA context, does the verifier's
first use (`gpu_contention.first_use`, "prewarm" below) and exits, without the quiet lock. Each sample
goes in the class of what the background process was doing meanwhile (all processes share the host
clock): making a context, prewarming, being torn down, or nothing (between an exit and the next fork).
Event times and host times (the call plus the synchronize, as the clock's host reading) are shown apart:
a class that moves either is one that timing must not overlap.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # ask NVML, so forks can still use CUDA

CLASSES = ("context", "prewarm", "teardown", "nothing")


def _timer(until: float, out: str, ready_w: int) -> None:
    """Time each kernel in turn until ``until``; write (kernel, start, end, event ms) rows to ``out``."""
    import torch

    from kforge.backends.clocks import CudaClock, l2_flush_bytes
    torch.cuda.set_device(0)
    clock = CudaClock(l2_flush_bytes())
    a, b = torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda")
    src = torch.randn(64 << 20, device="cuda")  # 256 MiB
    dst = torch.empty_like(src)
    small = torch.randn(1 << 20, device="cuda")
    kernels = {"matmul 2048 fp32": lambda: torch.mm(a, b), "copy 256 MiB": lambda: dst.copy_(src),
               "relu 4 MiB": lambda: torch.relu(small)}
    for fn in kernels.values():
        for _ in range(5):
            clock.time(fn)
    os.write(ready_w, b"r")
    rows = []
    while time.monotonic() < until:
        for name, fn in kernels.items():
            t0 = time.monotonic()
            ms, host_ms, _ = clock.time(fn)
            rows.append((name, t0, time.monotonic(), ms, host_ms))
    Path(out).write_text(json.dumps(rows))


def _spare(stamp_w: int) -> None:
    import torch

    from benchmarks.gpu_contention import first_use
    torch.cuda.set_device(0)
    torch.cuda.synchronize()
    os.write(stamp_w, f"{time.monotonic()!r}\n".encode())
    first_use()
    os.write(stamp_w, f"{time.monotonic()!r}\n".encode())


def _background(until: float, gap: float) -> list[tuple[str, float, float]]:
    """Fork spares one after another until ``until``; the (class, start, end) intervals they went through."""
    spans = []
    while time.monotonic() < until:
        r, w = os.pipe()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                _spare(w)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r) as fh:
            stamps = [float(x) for x in fh.read().split()]
        os.waitpid(pid, 0)
        gone = time.monotonic()
        if len(stamps) != 2:
            raise SystemExit("a background process failed")
        spans += [("context", t0, stamps[0]), ("prewarm", stamps[0], stamps[1]), ("teardown", stamps[1], gone)]
        time.sleep(gap)
    return spans


def classify(rows: list, spans: list) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Each sample's (event ms, host ms) goes to the first class (in ``CLASSES`` order) it overlaps."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    rank = {c: i for i, c in enumerate(CLASSES)}
    for name, t0, t1, ms, host_ms in rows:
        hit = [c for c, s, e in spans if s < t1 and e > t0]
        cls = min(hit, key=rank.__getitem__) if hit else "nothing"
        out.setdefault((name, cls), []).append((ms, host_ms))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="how long to time for")
    ap.add_argument("--gap", type=float, default=0.05, help="seconds between one spare's exit and the next fork")
    args = ap.parse_args()
    import torch  # imported before forking, as in a zygote; no CUDA context in this process
    if not torch.cuda.device_count():
        raise SystemExit("no GPU visible: this benchmark times CUDA kernels")
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(ready_r)
            os.close(go_w)
            until = float(os.read(go_r, 64).decode())  # shared deadline, set once both are ready
            _timer(until, out, ready_w)
            code = 0
        finally:
            os._exit(code)
    until = time.monotonic() + args.seconds + 5  # the timer's own start-up comes out of the first 5 s
    os.write(go_w, repr(until).encode())
    if os.read(ready_r, 1) != b"r":
        raise SystemExit("the timing process failed")
    spans = _background(until, args.gap)
    os.waitpid(pid, 0)
    rows = json.loads(Path(out).read_text())
    os.unlink(out)
    groups = classify(rows, spans)
    print(f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}; {len(spans) // 3} background processes, "
          f"{len(rows)} timed calls\n")
    print("| kernel | background | samples | event median ms | event p90 ms | vs nothing | host median ms | vs nothing |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in dict.fromkeys(r[0] for r in rows):
        quiet = groups.get((name, "nothing"), [(float("nan"), float("nan"))])
        base, host_base = (statistics.median(v) for v in zip(*quiet))
        for cls in CLASSES:
            pairs = groups.get((name, cls), [])
            if not pairs:
                continue
            ev = sorted(p[0] for p in pairs)
            med, host = statistics.median(ev), statistics.median(p[1] for p in pairs)
            p90 = ev[min(len(ev) - 1, int(0.9 * len(ev)))]
            print(f"| {name} | {cls} | {len(ev)} | {med:.4f} | {p90:.4f} | {100 * (med / base - 1):+.2f}% | "
                  f"{host:.4f} | {100 * (host / host_base - 1):+.2f}% |")


if __name__ == "__main__":
    main()

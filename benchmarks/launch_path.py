"""How much of a call's host-side launch path the verifier's CUDA clock times, with and without its spin.

    python benchmarks/launch_path.py [--backends triton,cuda] [--problems 4_Matmul,1_Gemm_Bias_GELU]
                                     [--precision bf16] [--hogs 0,8] [--calls 40]

For each built-in problem's oracle at the precision (and eager PyTorch beside it), in this process (a cuda
oracle builds its extension first, minutes on a cold cache): the host
time of one forward call made after a full synchronize (what the clock's timed call costs the host), and the
event time the clock reads with the L2 flush alone in front of the call and with the flush plus its
`LAUNCH_PAD_US` spin (what the verifier does). ``--hogs`` repeats everything with that many busy processes on
the host's cores: a launch path that outlasts the flush leaks into the flush-only column by an amount that
moves with the load; the padded column should not move. Needs an NVIDIA GPU.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kforge.backends.clocks import LAUNCH_PAD_US, CudaClock, l2_flush_bytes  # noqa: E402
from kforge.problems import builtin_solution_path, load_builtin  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _hog(stop) -> None:
    while not stop.is_set():
        pass


def _module(path: Path) -> types.ModuleType:
    """Import a solution from its file (Triton's @jit needs one) under a name of its own."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"launch_path_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _programs(problem, backend: str, precision: str) -> dict:
    dtype = DTYPES[precision]
    ref = types.ModuleType("reference")
    exec(compile(problem.source, "<reference>", "exec"), ref.__dict__)
    torch.manual_seed(0)
    init = ref.get_init_inputs()
    inputs = [x.to(device="cuda", dtype=dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
              for x in ref.get_inputs()]
    eager = ref.Model(*init).to(device="cuda", dtype=dtype)
    progs = {"eager": lambda: eager(*inputs)}
    path = builtin_solution_path(problem, backend, precision)
    if path is not None:
        torch.manual_seed(0)
        new = _module(path).ModelNew(*init).to(device="cuda", dtype=dtype)
        progs[backend] = lambda: new(*inputs)
    return progs


def _host_us(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def _event_ms(clock: CudaClock, fn, calls: int) -> float:
    return statistics.median(clock.time(fn)[0] for _ in range(calls))


def measure(problems, backends, precision: str, calls: int):
    """Yields (problem, program, host us, flush-only ms, flush+spin ms) as each is measured."""
    padded = CudaClock(l2_flush_bytes())
    bare = CudaClock(l2_flush_bytes())
    bare._spin = None  # the flush alone, as the clock was before its spin
    seen = set()
    for p in problems:
        for backend in backends:
            progs = _programs(p, backend, precision)
            if backend not in progs:
                continue
            with torch.no_grad():
                for fn in progs.values():
                    for _ in range(5):
                        fn()
                for name, fn in progs.items():
                    if (p.key, name) in seen:
                        continue  # eager once per problem
                    seen.add((p.key, name))
                    yield p.key, name, _host_us(fn, calls), _event_ms(bare, fn, calls), _event_ms(padded, fn, calls)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="triton,cuda")
    ap.add_argument("--problems", default="4_Matmul,1_Gemm_Bias_GELU,1_MLPBlock")
    ap.add_argument("--precision", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--hogs", default="0,8", help="busy host processes for each pass, comma-separated")
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_path: needs an NVIDIA GPU (the clock it measures is the CUDA one)", file=sys.stderr)
        return 2
    wanted = args.problems.split(",")
    problems = [p for p in load_builtin(size="gpu") if any(p.key.endswith(w) for w in wanted)]
    print(f"{torch.cuda.get_device_name()}; flush {l2_flush_bytes() >> 20} MiB, spin {LAUNCH_PAD_US} us")
    print(f"{'hogs':>4}  {'problem':28} {'program':8} {'host us':>8} {'flush only ms':>14} {'flush+spin ms':>14}")
    for n in (int(h) for h in args.hogs.split(",")):
        stop = mp.Event()
        hogs = [mp.Process(target=_hog, args=(stop,), daemon=True) for _ in range(n)]
        for h in hogs:
            h.start()
        try:
            for key, prog, host, bare, padded in measure(problems, args.backends.split(","), args.precision,
                                                         args.calls):
                print(f"{n:>4}  {key:28} {prog:8} {host:8.1f} {bare:14.4f} {padded:14.4f}", flush=True)
        finally:
            stop.set()
            for h in hogs:
                h.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

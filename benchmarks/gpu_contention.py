"""Do GPU processes on one host slow each other down? CUDA context creation, first use and teardown.

    python benchmarks/gpu_contention.py [--repeats 5] [--problems level1/4_Matmul,level2/2_Conv2d_ReLU_MaxPool]

Every verification runs in a fresh process, so it pays for a CUDA context, for first use (kernel modules,
cuBLAS/cuDNN handles, allocator segments) and for tearing the context down. Much of that is driver work
on the host, and the driver serialises some of it across processes, whichever GPU they use. This measures
each piece alone and with other processes doing the same at the same moment, on the same GPU (the
zygote's spare making its context while a candidate runs) and on another GPU (a second device slot).

Processes are forked from this one after torch is imported (as `kforge.sandbox.zygote` does) and wait at
a common start line. "ctx" makes a context in three timed steps: the driver's cuInit, its primary
context, and torch's set-up on top. "work" is the built-in problems' reference models: inputs drawn on
the device, a few forward calls and a comparison, in a process whose context is already made (as a
spare's is).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # ask NVML, so forks can still use CUDA

RESERVE = 1 << 30
"""Bytes ``first_use`` leaves in torch's allocator cache, so a candidate's allocations need no driver call."""

SCENARIOS = {
    "ctx alone": [(0, "ctx")],
    "ctx + ctx on the other GPU": [(0, "ctx"), (1, "ctx")],
    "work alone": [(0, "work")],
    "work + ctx on the same GPU": [(0, "work"), (0, "ctx")],
    "work + work on the other GPU": [(0, "work"), (1, "work")],
    "work + ctx, on both GPUs": [(0, "work"), (0, "ctx"), (1, "work"), (1, "ctx")],
    # The same with the spare's first use done ahead (first_use below).
    "ctx+warm alone": [(0, "ctx+warm")],
    "ctx+warm + ctx+warm on the other GPU": [(0, "ctx+warm"), (1, "ctx+warm")],
    "warm work alone": [(0, "warm work")],
    "warm work + ctx+warm on the same GPU": [(0, "warm work"), (0, "ctx+warm")],
    "warm work + warm work on the other GPU": [(0, "warm work"), (1, "warm work")],
    "warm work + ctx+warm, on both GPUs": [(0, "warm work"), (0, "ctx+warm"), (1, "warm work"), (1, "ctx+warm")],
}


def _child(gpu: int, task: str, problems: list, go_r: int, out_w: int) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    import torch

    if task.endswith("work"):  # its context made before the start line, as a spare's is
        torch.cuda.set_device(0)
        torch.cuda.synchronize()
        if task == "warm work":
            first_use()
    os.write(out_w, b"r")
    os.read(go_r, 1)
    parts, t0 = {}, time.monotonic()
    if task.startswith("ctx"):
        # The driver's two steps, then what torch adds; torch would make the same primary context itself.
        cuda = ctypes.CDLL("libcuda.so.1")
        if cuda.cuInit(0) != 0:
            raise RuntimeError("cuInit failed")
        parts["cuInit"], t0 = time.monotonic() - t0, time.monotonic()
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        cuda.cuDeviceGet(ctypes.byref(dev), 0)
        if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0 or cuda.cuCtxSetCurrent(ctx) != 0:
            raise RuntimeError("no primary context")
        parts["context"], t0 = time.monotonic() - t0, time.monotonic()
        torch.cuda.set_device(0)
        torch.cuda.synchronize()
        parts["torch"], t0 = time.monotonic() - t0, time.monotonic()
        if task == "ctx+warm":
            steps = first_use()
            parts["prewarm"] = time.monotonic() - t0
            parts.update({f"prewarm: {k}": v for k, v in steps.items()})
    else:
        for problem in problems:
            _use(torch, problem)
        parts["work"] = time.monotonic() - t0
    os.write(out_w, json.dumps({"task": task, "gpu": gpu, **parts}).encode())
    os._exit(0)


def first_use(reserve: int = RESERVE) -> dict[str, float]:
    """The verifier's problem-independent first use on device 0, and ``reserve`` bytes left cached and free.

    What a spare could do ahead of its candidate (kforge tried it, see docs/performance.md); the
    seconds each step took.
    """
    import torch
    import torch.nn.functional as F

    from kforge.verify.compare import check_degenerate, compare_tensor
    dev = torch.device("cuda", 0)
    x: dict = {}

    def allocator():  # segments cut into the candidate's allocations later, with no driver call then
        small = [torch.empty(1 << 20, dtype=torch.uint8, device=dev) for _ in range(16)]
        big = torch.empty(reserve, dtype=torch.uint8, device=dev) if reserve else None
        del small, big

    def draw_and_compare():  # inputs drawn on the device, copies, NaN fills, the fp32 comparison
        torch.manual_seed(0)
        x["a"], x["b"] = torch.randn(64, 64, device=dev), torch.rand(64, 64, device=dev).clone()
        compare_tensor(x["a"], x["a"].clone(), 1e-4, 1e-4)
        check_degenerate(x["a"], x["a"])
        torch.equal(x["a"], x["b"])
        x["a"].clone().fill_(float("nan"))

    def cublas():  # the handle, its workspace, and the first GEMM kernels
        x["a"] @ x["b"]

    def cudnn():
        F.conv2d(x["a"].view(1, 1, 64, 64), x["b"][:3, :3].reshape(1, 1, 3, 3))

    def half_types():
        for h in (x["a"].half(), x["a"].bfloat16()):
            compare_tensor(h, h.clone(), 1e-2, 1e-2)
            h @ h

    took: dict[str, float] = {}
    with torch.no_grad():
        for step in (allocator, draw_and_compare, cublas, cudnn, half_types):
            t0 = time.monotonic()
            step()
            torch.cuda.synchronize()
            took[step.__name__] = time.monotonic() - t0
    return took


def _use(torch, problem) -> None:
    """A correctness trial's kind of work on a problem's reference model, in a fresh process."""
    ns: dict = {}
    exec(compile(problem.source, problem.name, "exec"), ns)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = ns["Model"](*ns["get_init_inputs"]())
        for _ in range(3):
            inputs = ns["get_inputs"]()
            with torch.no_grad():
                a, b = model(*inputs), model(*[x.clone() for x in inputs])
            assert bool(((a - b).abs() <= 1e-3 + 1e-3 * b.abs()).all())
    torch.cuda.synchronize()


def run(scenario: list, problems: list) -> list[dict]:
    """Fork one process per (gpu, task), start them together; each one's seconds, and its exit's."""
    go_r, go_w = os.pipe()
    kids = []
    for gpu, task in scenario:
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(out_r)
                _child(gpu, task, problems, go_r, out_w)
            finally:
                os._exit(1)
        os.close(out_w)
        kids.append((pid, out_r))
    for _, out_r in kids:
        if os.read(out_r, 1) != b"r":
            raise SystemExit("a child failed before the start line")
    os.write(go_w, b"g" * len(kids))
    results = []
    for pid, out_r in kids:
        data = b""
        while chunk := os.read(out_r, 4096):  # EOF: the child has closed its descriptors while exiting
            data += chunk
            if data.endswith(b"}"):
                break
        done = time.monotonic()
        os.waitpid(pid, 0)  # the context's teardown happens in here
        os.close(out_r)
        if not data:
            raise SystemExit("a child died")
        results.append(dict(json.loads(data), exit=time.monotonic() - done))
    os.close(go_r)
    os.close(go_w)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--problems", default="level1/4_Matmul,level1/6_Conv2d,level2/2_Conv2d_ReLU_MaxPool,"
                                          "level3/2_AttentionBlock")
    args = ap.parse_args()
    import torch  # imported once here, like a zygote, so children start warm

    from kforge.problems import load_builtin
    problems = load_builtin(names=args.problems.split(","), size="gpu")
    gpus = torch.cuda.device_count()  # NVML answers: no context is made here
    if not gpus:
        raise SystemExit("no GPU visible: this benchmark measures CUDA processes")
    print(f"{gpus} GPU(s); {os.cpu_count()} CPUs; torch {torch.__version__}")
    run(SCENARIOS["work alone"], problems)  # page in the libraries once, untimed
    rows = []
    for name, scenario in SCENARIOS.items():
        if gpus < 2 and any(g == 1 for g, _ in scenario):
            continue
        samples: dict = {}
        for _ in range(args.repeats):
            for r in run(scenario, problems):
                if r.pop("gpu") == 0:
                    for part, sec in r.items():
                        if part != "task":
                            samples.setdefault((r["task"], part), []).append(sec)
        for (task, part), vals in samples.items():
            rows.append((name, task, part, statistics.median(vals)))
        print(".", end="", flush=True)
    print(f"\n\nseconds, median of {args.repeats}, for the GPU-0 process of each kind; ctx = cuInit, then the "
          f"primary context, then torch's own set-up; work = {args.problems}; exit = the process's exit after its "
          "result (the context's teardown)\n")
    print("| scenario | process | part | s |")
    print("|---|---|---|---:|")
    for name, task, part, sec in rows:
        print(f"| {name} | {task} | {part} | {sec:.3f} |")


if __name__ == "__main__":
    main()

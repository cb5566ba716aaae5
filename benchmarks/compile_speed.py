"""How long a fresh (uncached) extension build takes, and what each of kforge's build steps buys.

    python benchmarks/compile_speed.py [--backend cuda|cpu] [--repeats 1]

Builds the backend's one-shot example (torch kept out of the .cu) and a KernelBench-style variant
(torch types inside the .cu) in fresh build directories with:
  vanilla    torch.utils.cpp_extension.load_inline as is
  pch        + kforge's precompiled torch/extension.h (the full header) for the C++ binding file
  +light     + that header without torch's C++ frontend (cuda only: on cpu that is the kforge column)
  torch-free + the .cu compiled without torch headers (when it uses none), no precompiled header
  kforge     all of them (what the verifier does)
The precompiled headers are built once up front and reported separately (a once-per-machine cost).
Prints a table; nothing is cached between rows except the precompiled header.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CUDA_TORCH_IN_CU = r'''
#include <torch/extension.h>
__global__ void add_scale_kernel(const float* a, const float* b, float* o, float s, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) o[i] = (a[i] + b[i]) * s;
}
torch::Tensor add_scale(torch::Tensor a, torch::Tensor b, double scale) {
    auto o = torch::empty_like(a);
    int64_t n = a.numel();
    add_scale_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), o.data_ptr<float>(), (float)scale, n);
    return o;
}
'''


def example_sources(backend: str) -> dict:
    """The load_inline arguments of the backend's one-shot example, read without running it."""
    import ast
    path = Path(__file__).resolve().parents[1] / "prompts" / "examples" / backend / "model_new.py"
    tree = ast.parse(path.read_text())
    consts = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "load_inline":
            kw = {}
            for k in node.keywords:
                v = k.value
                if isinstance(v, ast.Name):
                    kw[k.arg] = consts[v.id]
                elif isinstance(v, ast.List) and all(isinstance(e, ast.Name) for e in v.elts):
                    kw[k.arg] = [consts[e.id] for e in v.elts]
                else:
                    kw[k.arg] = ast.literal_eval(v)
            return kw
    raise SystemExit(f"no load_inline call in {path}")


#: Builder arguments of each column (vanilla is torch's own load_inline).
MODES = {"pch": dict(use_pch=True, torch_free_cu=False, light_header=False),
         "+light": dict(use_pch=True, torch_free_cu=False, light_header=True),
         "torch-free": dict(use_pch=False, torch_free_cu=True, light_header=False),
         "kforge": dict(use_pch=True, torch_free_cu=True, light_header=True)}


def build_once(kwargs: dict, mode: str, cache: Path) -> float:
    """Build in a fresh directory under ``mode``; returns seconds."""
    import copy

    import torch.utils.cpp_extension as ce

    from kforge.backends.build import Builder
    kw = copy.deepcopy(kwargs)  # torch's load_inline edits the source lists it is given
    kw["name"] = f"{kw['name']}_{uuid.uuid4().hex[:8]}"  # a new name: nothing reused
    start = time.perf_counter()
    if mode == "vanilla":
        d = cache / "vanilla" / kw["name"]
        d.mkdir(parents=True)
        ce.load_inline(build_directory=str(d), **kw)
    else:
        Builder(cache, **MODES[mode]).load_inline(**kw)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    import torch
    if args.backend == "cuda":
        major, minor = torch.cuda.get_device_capability()
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}{'a' if major >= 9 else ''}")
    variants = {"one-shot example": example_sources(args.backend)}
    if args.backend == "cuda":
        variants["torch in .cu (KernelBench style)"] = dict(
            name="kb_style", cpp_sources="torch::Tensor add_scale(torch::Tensor a, torch::Tensor b, double scale);",
            cuda_sources=CUDA_TORCH_IN_CU, functions=["add_scale"], extra_cuda_cflags=["-O3"])
    cache = Path(tempfile.mkdtemp(prefix="kforge-compile-speed-"))
    from kforge.backends.build import Builder
    made = {}
    for light in (False, True):  # the header of each set of flags the variants use, timed for the first
        for kw in variants.values():
            t0 = time.perf_counter()
            Builder(cache).headers.ensure(list(kw.get("extra_cflags") or []), light)
            made.setdefault(light, time.perf_counter() - t0)
    device = torch.cuda.get_device_name() if args.backend == "cuda" else "cpu"
    print(f"\ncold extension builds ({args.backend}, {device}, {os.cpu_count()} cores, torch {torch.__version__}); "
          f"precompiling torch/extension.h once: {made[False]:.1f} s, the light one {made[True]:.1f} s\n")
    modes = ["vanilla", *MODES] if args.backend == "cuda" else ["vanilla", "pch", "kforge"]
    print(f"{'source':36} " + " ".join(f"{m:>10}" for m in modes) + f"   (seconds, median of {args.repeats})")
    for label, kw in variants.items():
        row = [statistics.median(build_once(kw, mode, cache) for _ in range(args.repeats)) for mode in modes]
        print(f"{label:36} " + " ".join(f"{x:10.1f}" for x in row))


if __name__ == "__main__":
    main()

"""Triton's interpreter computing bfloat16 by value once kforge's shim is installed (`kforge.backends.triton_bf16`):
the roundings it uses agree with torch's, and bf16 kernels written the way models write them compute what a GPU
computes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kforge.backends.triton_bf16 import to_bf16, to_float32

ROOT = Path(__file__).resolve().parents[2]


def test_the_roundings_are_torchs():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(50_000, generator=g) * 10.0 ** torch.randint(-40, 38, (50_000,), generator=g),
                   torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1e-45, 3.4e38, 1.00390625, 1.01171875])])
    bits = to_bf16(x.numpy())
    assert np.array_equal(bits, x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))  # ties to even too
    assert torch.equal(torch.from_numpy(to_float32(bits)), x.to(torch.bfloat16).float())
    assert np.isnan(to_float32(to_bf16(np.array([float("nan")], dtype=np.float32)))).all()


# The way models write a bf16 Triton kernel: bf16 tiles into tl.dot with an fp32 accumulator, and an epilogue that
# computes on the bf16 values without casting them first.
KERNELS = r'''
import json, sys
import torch, triton, triton.language as tl
if sys.argv[1] == "shim":
    from kforge.backends.triton_bf16 import install
    assert install()

@triton.jit
def linear_act(x_ptr, w_ptr, b_ptr, y_ptr, z_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + (k + rk)[:, None], mask=(rn[None, :] < N) & ((k + rk)[:, None] < K), other=0.0)
        acc += tl.dot(x, w)
    b = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    y = acc.to(tl.bfloat16) + b[None, :]
    y = tl.where(y > 0, y, y * 0.01)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)
    z = tl.sum(tl.where(mask, y, 0.0).to(tl.float32), axis=1)
    tl.store(z_ptr + rm, z.to(tl.bfloat16), mask=rm < M)

M, N, K = 37, 45, 70
g = torch.Generator().manual_seed(0)
x, w, b = (torch.randn(*s, generator=g).to(torch.bfloat16) for s in ((M, K), (N, K), (N,)))
y, z = torch.empty(M, N, dtype=torch.bfloat16), torch.empty(M, dtype=torch.bfloat16)
linear_act[(triton.cdiv(M, 16), 1)](x, w, b, y, z, M, N, K, BM=16, BN=64, BK=16)  # a row in one program
ref = torch.nn.functional.leaky_relu(x.float() @ w.float().t() + b.float(), 0.01)
print(json.dumps({"y": (y.float() - ref).abs().max().item(), "z": (z.float() - ref.sum(1)).abs().max().item(),
                  "scale": ref.abs().max().item()}))
'''


def run_interpreted(mode: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", KERNELS, mode], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_model_style_bf16_kernel_computes_its_values_under_the_interpreter():
    pytest.importorskip("triton")
    got = run_interpreted("shim")
    # bf16 rounding of the values (about 2**-8 relative) and of a row's 45-term sum: a few units of the last place
    assert got["y"] < 0.02 * got["scale"] and got["z"] < 0.1 * got["scale"], got

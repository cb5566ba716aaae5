import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack

# C = A @ B in fp32 on CUDA cores: one thread per output element, a K loop of FMAs. Correct, not fast: the
# tensor-core version on Hopper (WGMMA with 3xTF32 for fp32 accuracy) is the next step for this backend.


@cute.kernel
def matmul_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, M: cutlass.Int32, N: cutlass.Int32,
                  K: cutlass.Int32):
    tx, ty, _ = cute.arch.thread_idx()
    bx, by, _ = cute.arch.block_idx()
    col = bx * 16 + tx
    row = by * 16 + ty
    if row < M and col < N:
        acc = cutlass.Float32(0.0)
        for k in range(K):
            acc += gA[row, k] * gB[k, col]
        gC[row, col] = acc


@cute.jit
def matmul(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, M: cutlass.Int32, N: cutlass.Int32, K: cutlass.Int32):
    matmul_kernel(mA, mB, mC, M, N, K).launch(grid=[(N + 15) // 16, (M + 15) // 16, 1], block=[16, 16, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.exe = None

    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty(M, N, device=A.device, dtype=A.dtype)
        args = (from_dlpack(A), from_dlpack(B), from_dlpack(C), M, N, K)
        if self.exe is None:
            self.exe = cute.compile(matmul, *args)
        self.exe(*args)
        return C

import tilelang
import tilelang.language as T
import torch
import torch.nn as nn

# C = A @ B in fp32 on Hopper's tensor cores with 3xTF32: each operand tile is split in shared memory into a
# part TF32 holds exactly (the top 10 mantissa bits) and the rest, and three TF32 products (lo*hi, hi*lo,
# hi*hi, small ones first) accumulate in an fp32 fragment. The dropped lo*lo term is ~2^-22 of the result: fp32
# accuracy, which plain TF32 (~1e-3) would not give against the fp32 reference.


@tilelang.jit(out_idx=[-1])
def matmul_3xtf32(M, N, K, block_M=128, block_N=256, block_K=16, num_stages=3, threads=256):
    f32 = "float32"

    @T.prim_func
    def main(A: T.Tensor((M, K), f32), B: T.Tensor((K, N), f32), C: T.Tensor((M, N), f32)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), f32)
            B_s = T.alloc_shared((block_K, block_N), f32)
            A_hi = T.alloc_shared((block_M, block_K), f32)
            A_lo = T.alloc_shared((block_M, block_K), f32)
            B_hi = T.alloc_shared((block_K, block_N), f32)
            B_lo = T.alloc_shared((block_K, block_N), f32)
            acc = T.alloc_fragment((block_M, block_N), f32)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                for i, j in T.Parallel(block_M, block_K):
                    hi = T.reinterpret(T.reinterpret(A_s[i, j], "uint32") & T.uint32(0xFFFFE000), f32)
                    A_hi[i, j] = hi
                    A_lo[i, j] = A_s[i, j] - hi
                for i, j in T.Parallel(block_K, block_N):
                    hi = T.reinterpret(T.reinterpret(B_s[i, j], "uint32") & T.uint32(0xFFFFE000), f32)
                    B_hi[i, j] = hi
                    B_lo[i, j] = B_s[i, j] - hi
                T.gemm(A_lo, B_hi, acc)
                T.gemm(A_hi, B_lo, acc)
                T.gemm(A_hi, B_hi, acc)
            T.copy(acc, C[by * block_M, bx * block_N])

    return main


_compiled = {}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        shape = (A.shape[0], B.shape[1], A.shape[1])
        if shape not in _compiled:
            _compiled[shape] = matmul_3xtf32(*shape)
        return _compiled[shape](A, B)

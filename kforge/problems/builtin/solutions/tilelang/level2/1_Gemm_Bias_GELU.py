import tilelang
import tilelang.language as T
import torch
import torch.nn as nn

# GELU(x @ W^T + b): the GEMM on Hopper's tensor cores with 3xTF32 (fp32 accuracy; see level1/4_Matmul), W read
# as it is stored (out, in) through T.gemm's transpose_B; bias and the exact erf GELU applied to the accumulator
# fragment before it is written.


@tilelang.jit(out_idx=[-1])
def linear_gelu(M, N, K, block_M=128, block_N=128, block_K=16, threads=256):
    f32 = "float32"

    @T.prim_func
    def main(X: T.Tensor((M, K), f32), W: T.Tensor((N, K), f32), bias: T.Tensor((N,), f32),
             Y: T.Tensor((M, N), f32)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            X_s = T.alloc_shared((block_M, block_K), f32)
            W_s = T.alloc_shared((block_N, block_K), f32)
            X_hi = T.alloc_shared((block_M, block_K), f32)
            X_lo = T.alloc_shared((block_M, block_K), f32)
            W_hi = T.alloc_shared((block_N, block_K), f32)
            W_lo = T.alloc_shared((block_N, block_K), f32)
            acc = T.alloc_fragment((block_M, block_N), f32)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(X[by * block_M, k * block_K], X_s)
                T.copy(W[bx * block_N, k * block_K], W_s)
                for i, j in T.Parallel(block_M, block_K):
                    hi = T.reinterpret(T.reinterpret(X_s[i, j], "uint32") & T.uint32(0xFFFFE000), f32)
                    X_hi[i, j] = hi
                    X_lo[i, j] = X_s[i, j] - hi
                for i, j in T.Parallel(block_N, block_K):
                    hi = T.reinterpret(T.reinterpret(W_s[i, j], "uint32") & T.uint32(0xFFFFE000), f32)
                    W_hi[i, j] = hi
                    W_lo[i, j] = W_s[i, j] - hi
                T.gemm(X_lo, W_hi, acc, transpose_B=True)
                T.gemm(X_hi, W_lo, acc, transpose_B=True)
                T.gemm(X_hi, W_hi, acc, transpose_B=True)
            for i, j in T.Parallel(block_M, block_N):
                v = acc[i, j] + bias[bx * block_N + j]
                acc[i, j] = 0.5 * v * (1.0 + T.erf(v * 0.7071067811865476))
            T.copy(acc, Y[by * block_M, bx * block_N])

    return main


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.kernels = {}

    def forward(self, x):
        x = x.contiguous()
        shape = (x.shape[0], self.linear.out_features, x.shape[1])
        if shape not in self.kernels:
            self.kernels[shape] = linear_gelu(*shape)
        return self.kernels[shape](x, self.linear.weight, self.linear.bias)

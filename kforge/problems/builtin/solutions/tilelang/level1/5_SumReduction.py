import tilelang
import tilelang.language as T
import torch
import torch.nn as nn


@tilelang.jit(out_idx=[-1])
def sum_dim1(B, R, C, block=256):
    # one thread per output column: it walks down the R rows of its batch, neighbours reading neighbours' memory
    @T.prim_func
    def main(X: T.Tensor((B, R, C), "float32"), Y: T.Tensor((B, 1, C), "float32")):
        with T.Kernel(T.ceildiv(C, block), B, threads=block) as (bx, b):
            acc = T.alloc_fragment((block,), "float32")
            T.clear(acc)
            for r in T.serial(R):
                for j in T.Parallel(block):
                    if bx * block + j < C:
                        acc[j] += X[b, r, bx * block + j]
            for j in T.Parallel(block):
                if bx * block + j < C:
                    Y[b, 0, bx * block + j] = acc[j]

    return main


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        assert dim == 1
        self.k = {}

    def forward(self, x):
        x = x.contiguous()
        if x.shape not in self.k:
            self.k[x.shape] = sum_dim1(*x.shape)
        return self.k[x.shape](x)

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_rm,
                HAS_BIAS: tl.constexpr, GELU: tl.constexpr, HAS_RES: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # C = A @ B (+ bias[n]) (-> exact GELU) (+ res[m, n]). bf16 tiles go to the tensor cores with tl.dot,
    # which accumulates in the fp32 `acc`; the epilogue works on fp32 and the store rounds once to C's dtype.
    # B comes through its strides: (K, N) row-major, or nn.Linear's (N, K) weight read as its transpose.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # grouped order: GROUP_M row blocks share their B column panels in L2
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_m
    pid_n = (pid % group) // group_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    if GELU:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    if HAS_RES:
        res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)
        acc += res.to(tl.float32)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


def gemm(a, b, bias=None, gelu=False, residual=None):
    """a (M, K) @ b (K, N) in a's dtype; b may be a transposed view (nn.Linear's weight.t()), unit-stride along
    k or n; fused epilogue. Tiles for an H100 (wgmma through tl.dot): 128 x 256 x 64, 3 stages, 8 warps."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if residual is not None:
        assert residual.shape == (M, N) and residual.stride(1) == 1
    BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    gemm_kernel[grid](a, b, c, bias if bias is not None else c, residual if residual is not None else c,
                      M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                      residual.stride(0) if residual is not None else 0,
                      HAS_BIAS=bias is not None, GELU=gelu, HAS_RES=residual is not None,
                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8, num_warps=8, num_stages=3)
    return c


class ModelNew(nn.Module):
    """bf16 matmul on the tensor cores (tl.dot on bf16 tiles, fp32 accumulation, one rounding on store)."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return gemm(A.contiguous(), B.contiguous())

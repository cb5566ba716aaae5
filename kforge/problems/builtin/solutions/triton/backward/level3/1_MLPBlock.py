# Hand-written solution (kforge's oracle, not an LLM): the pre-norm MLP block's forward and backward as Triton
# kernels behind a torch.autograd.Function, for the backward mode (verify.backward=true). One GEMM kernel (any
# strides, so transposes are views; bias, GELU and residual epilogues) serves the forward's two products and the
# backward's four; the forward keeps the norm's output, the hidden pre-activation and the GELU's output.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  HAS_BIAS: tl.constexpr, GELU: tl.constexpr, HAS_RES: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # C = A @ B (+ bias[n]) (-> exact GELU) (+ res[m, n]); res has C's strides. fp32 FMA dot (no TF32).
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
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)[None, :]
    if GELU:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    if HAS_RES:
        acc += tl.load(res_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, mask=mask, other=0.0)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc, mask=mask)


def matmul(a, b, bias=None, gelu=False, residual=None):
    """a (M, K) @ b (K, N), b may be a transposed view (nn.Linear's weight.t()); fused epilogue."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 32
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    matmul_kernel[grid](a, b, c, bias if bias is not None else c, residual if residual is not None else c,
                        M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                        HAS_BIAS=bias is not None, GELU=gelu, HAS_RES=residual is not None,
                        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8, num_warps=8, num_stages=3)
    return c


@triton.jit
def ln_fwd_kernel(x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    # One program per row; exact two-pass mean and variance; keeps the row's mean and 1/std for the backward.
    row = tl.program_id(0).to(tl.int64)
    x_row, o_row = x_ptr + row * n_cols, out_ptr + row * n_cols
    cols = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        d = tl.where(mask, tl.load(x_row + offs, mask=mask, other=0.0) - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)  # biased variance, as nn.LayerNorm
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(o_row + offs, (x - mean) * rstd * w + b, mask=mask)


@triton.jit
def ln_bwd_dx_kernel(g_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, res_ptr, dx_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    # One program per row: dx = res + rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)) (res: the residual's
    # gradient, added in the same pass).
    row = tl.program_id(0).to(tl.int64)
    g_row, x_row, d_row = g_ptr + row * n_cols, x_ptr + row * n_cols, dx_ptr + row * n_cols
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    cols = tl.arange(0, BLOCK_SIZE)
    a1 = tl.zeros([BLOCK_SIZE], tl.float32)
    a2 = tl.zeros([BLOCK_SIZE], tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        gw = tl.load(g_row + offs, mask=mask, other=0.0) * tl.load(w_ptr + offs, mask=mask, other=0.0)
        xh = (tl.load(x_row + offs, mask=mask, other=0.0) - mean) * rstd
        a1 += gw
        a2 += gw * xh
    c1 = tl.sum(a1, axis=0) / n_cols
    c2 = tl.sum(a2, axis=0) / n_cols
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + cols
        mask = offs < n_cols
        gw = tl.load(g_row + offs, mask=mask, other=0.0) * tl.load(w_ptr + offs, mask=mask, other=0.0)
        xh = (tl.load(x_row + offs, mask=mask, other=0.0) - mean) * rstd
        res = tl.load(res_ptr + row * n_cols + offs, mask=mask, other=0.0)
        tl.store(d_row + offs, res + rstd * (gw - c1 - xh * c2), mask=mask)


@triton.jit
def ln_bwd_dwdb_kernel(g_ptr, x_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr, n_rows, n_cols,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per BLOCK_N columns, down every row: dw = sum g * xhat, db = sum g (no atomics: deterministic).
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    acc_w = tl.zeros([BLOCK_N], tl.float32)
    acc_b = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_rows, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_mask = rows < n_rows
        offs = rows[:, None].to(tl.int64) * n_cols + cols[None, :]
        mask = row_mask[:, None] & col_mask[None, :]
        g = tl.load(g_ptr + offs, mask=mask, other=0.0)
        mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        xh = (tl.load(x_ptr + offs, mask=mask, other=0.0) - mean[:, None]) * rstd[:, None]
        acc_w += tl.sum(g * xh, axis=0)
        acc_b += tl.sum(g, axis=0)
    tl.store(dw_ptr + cols, acc_w, mask=col_mask)
    tl.store(db_ptr + cols, acc_b, mask=col_mask)


@triton.jit
def gelu_fwd_kernel(u_ptr, a_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    u = tl.load(u_ptr + offs, mask=mask)
    tl.store(a_ptr + offs, 0.5 * u * (1.0 + tl.math.erf(u * 0.7071067811865476)), mask=mask)


@triton.jit
def gelu_bwd_kernel(da_ptr, u_ptr, du_ptr, n, BLOCK_SIZE: tl.constexpr):
    # exact GELU's derivative: Phi(u) + u * phi(u)
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    u = tl.load(u_ptr + offs, mask=mask)
    d = 0.5 * (1.0 + tl.math.erf(u * 0.7071067811865476)) + u * 0.3989422804014327 * tl.exp(-0.5 * u * u)
    tl.store(du_ptr + offs, tl.load(da_ptr + offs, mask=mask) * d, mask=mask)


@triton.jit
def column_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per BLOCK_N columns, down every row (a bias's gradient: the sum over the batch).
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_rows, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < n_rows) & col_mask[None, :]
        acc += tl.sum(tl.load(x_ptr + rows[:, None].to(tl.int64) * n_cols + cols[None, :], mask=mask, other=0.0),
                      axis=0)
    tl.store(out_ptr + cols, acc, mask=col_mask)


def _block(n_cols):
    return min(4096, triton.next_power_of_2(n_cols))


def _column_sums(x2d):
    n_rows, n_cols = x2d.shape
    out = torch.empty(n_cols, dtype=torch.float32, device=x2d.device)
    column_sum_kernel[(triton.cdiv(n_cols, 64),)](x2d, out, n_rows, n_cols, BLOCK_M=64, BLOCK_N=64, num_warps=4)
    return out


class MLPBlockFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ln_w, ln_b, eps, w1, b1, w2, b2):
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        T, D = x2d.shape
        h = torch.empty_like(x2d)
        mean = torch.empty(T, dtype=torch.float32, device=x.device)
        rstd = torch.empty_like(mean)
        ln_fwd_kernel[(T,)](x2d, ln_w.contiguous(), ln_b.contiguous(), h, mean, rstd, D, eps,
                            BLOCK_SIZE=_block(D), num_warps=4)
        u = matmul(h, w1.t(), bias=b1)
        a = torch.empty_like(u)
        gelu_fwd_kernel[(triton.cdiv(u.numel(), 1024),)](u, a, u.numel(), BLOCK_SIZE=1024)
        out = matmul(a, w2.t(), bias=b2, residual=x2d)
        ctx.save_for_backward(x2d, ln_w, mean, rstd, h, u, a, w1, w2)
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, grad):
        x2d, ln_w, mean, rstd, h, u, a, w1, w2 = ctx.saved_tensors
        T, D = x2d.shape
        g = grad.reshape(T, D).contiguous()
        db2 = _column_sums(g)
        dw2 = matmul(g.t(), a)        # (D, T) @ (T, 4D)
        da = matmul(g, w2)            # (T, D) @ (D, 4D)
        du = torch.empty_like(da)
        gelu_bwd_kernel[(triton.cdiv(du.numel(), 1024),)](da, u, du, du.numel(), BLOCK_SIZE=1024)
        db1 = _column_sums(du)
        dw1 = matmul(du.t(), h)       # (4D, T) @ (T, D)
        dh = matmul(du, w1)           # (T, 4D) @ (4D, D)
        dx = torch.empty_like(x2d)
        ln_bwd_dx_kernel[(T,)](dh, x2d, ln_w.contiguous(), mean, rstd, g, dx, D, BLOCK_SIZE=_block(D), num_warps=4)
        dlw = torch.empty(D, dtype=torch.float32, device=x2d.device)
        dlb = torch.empty_like(dlw)
        ln_bwd_dwdb_kernel[(triton.cdiv(D, 64),)](dh, x2d, mean, rstd, dlw, dlb, T, D, BLOCK_M=64, BLOCK_N=64,
                                                  num_warps=4)
        return dx.view(grad.shape), dlw, dlb, None, dw1, db1, dw2, db2


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)  # the reference's parameters, by the same names
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        n = self.norm
        return MLPBlockFunction.apply(x, n.weight, n.bias, n.eps, self.fc1.weight, self.fc1.bias, self.fc2.weight,
                                      self.fc2.bias)

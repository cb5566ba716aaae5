import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    # One program per row, the row held in registers: exact two-pass mean/variance in fp32, one read;
    # the normalised row is stored in the output's dtype (the next GEMM's operand).
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (d * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


def layernorm(x2d, norm):
    rows, n_cols = x2d.shape
    out = torch.empty_like(x2d)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    layernorm_kernel[(rows,)](x2d, norm.weight, norm.bias, out, n_cols, norm.eps, BLOCK_SIZE=BLOCK_SIZE,
                              num_warps=8 if BLOCK_SIZE >= 4096 else 4)
    return out


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


try:  # Gluon, Triton's explicit dialect (Triton >= 3.5): TMA, mbarriers, wgmma and warp specialisation
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                                  warpgroup_mma_wait)
except ImportError:
    gluon = None
if os.environ.get("TRITON_INTERPRET") == "1":  # the interpreter runs tl kernels only, on CPU tensors
    gluon = None

if gluon is not None:
    @gluon.jit
    def _tile_of(t, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
        # GROUP_M row tiles walk the column tiles together: their A panels and B's columns stay in L2
        group = GROUP_M * num_pid_n
        first_m = (t // group) * GROUP_M
        group_m = gl.minimum(num_pid_m - first_m, GROUP_M)
        return first_m + (t % group) % group_m, (t % group) // group_m

    @gluon.jit
    def _erf(x):
        # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7) without branches: libdevice's erff branches on |x|, and
        # the epilogue unrolls it for every accumulator
        ax = gl.abs(x)
        t = gl.fdiv(1.0, 1.0 + 0.3275911 * ax, ieee_rounding=False)
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        y = 1.0 - poly * gl.exp(-ax * ax)
        return gl.where(x < 0, -y, y)

    @gluon.jit
    def _split_n(x, PARTS: gl.constexpr):
        # (M, N) -> PARTS tensors of (M, N / PARTS): each a subset of x's registers, nothing moves
        xs = (x, )
        for _ in gl.static_range(PARTS.bit_length() - 1):
            nxt = ()
            for j in gl.static_range(len(xs)):
                y = xs[j]
                nxt += y.reshape(y.shape[0], 2, y.shape[1] // 2).permute(0, 2, 1).split()
            xs = nxt
        return xs

    @gluon.jit
    def _ws_loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M: gl.constexpr,
                   BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                   B_KMAJOR: gl.constexpr):
        # one warp: TMA loads of the A and B tiles into a ring of STAGES buffers, as far ahead as the ring allows
        num_pid_m = gl.cdiv(M, BLOCK_M)
        num_pid_n = gl.cdiv(N, BLOCK_N)
        it = 0
        for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
            pid_m, pid_n = _tile_of(t, num_pid_m, num_pid_n, GROUP_M)
            for k in range(0, K, BLOCK_K):
                s = it % STAGES
                # a fresh barrier counts as having completed the phase before 0: the first lap does not wait
                mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, k], ready.index(s), a_bufs.index(s))
                if B_KMAJOR:
                    tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, k], ready.index(s), b_bufs.index(s))
                else:
                    tma.async_copy_global_to_shared(b_desc, [k, pid_n * BLOCK_N], ready.index(s), b_bufs.index(s))
                it += 1

    @gluon.jit
    def _ws_consumer(a_bufs, b_bufs, ready, empty, c_desc, c_smem, bias_ptr, res_ptr, stride_rm, M, N, K,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, EPI_N: gl.constexpr,
                     STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr, HAS_BIAS: gl.constexpr,
                     GELU: gl.constexpr, HAS_RES: gl.constexpr, NUM_WARPS: gl.constexpr):
        # two warpgroups: wgmma on the 128 x 256 tile (64 rows each), then the epilogue on the fp32 accumulators
        layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
        num_pid_m = gl.cdiv(M, BLOCK_M)
        num_pid_n = gl.cdiv(N, BLOCK_N)
        it = 0
        for t in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
            pid_m, pid_n = _tile_of(t, num_pid_m, num_pid_n, GROUP_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * BLOCK_N
            acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout)
            for k in range(0, K, BLOCK_K):
                s = it % STAGES
                mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                b = b_bufs.index(s)
                if B_KMAJOR:
                    b = b.permute((1, 0))
                acc = warpgroup_mma(a_bufs.index(s), b, acc, is_async=True)
                # one MMA group in flight: the one before it is done with its stage, which goes back to the loader
                acc = warpgroup_mma_wait(1, deps=(acc, ))
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k > 0)
                it += 1
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
            # the epilogue a 64-column part at a time (fewer live registers), each part rounded once and
            # written by TMA (which clips edge tiles); the loader is already filling the ring for the next tile
            parts = _split_n(acc, BLOCK_N // EPI_N)
            lay: gl.constexpr = parts[0].type.layout
            for i in gl.static_range(len(parts)):
                x = parts[i]
                offs_n = off_n + i * EPI_N + gl.arange(0, EPI_N, layout=gl.SliceLayout(0, lay))
                if HAS_BIAS:
                    bias = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
                    x = x + gl.expand_dims(bias.to(gl.float32), 0)
                if GELU:
                    x = 0.5 * x * (1.0 + _erf(x * 0.7071067811865476))
                if HAS_RES:
                    offs_m = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, lay))
                    rmask = (gl.expand_dims(offs_m, 1) < M) & (gl.expand_dims(offs_n, 0) < N)
                    res = gl.load(res_ptr + gl.expand_dims(offs_m, 1) * stride_rm + gl.expand_dims(offs_n, 0),
                                  mask=rmask, other=0.0)
                    x = x + res.to(gl.float32)
                buf = c_smem.index(i % 2)
                tma.store_wait(pendings=1)  # the store two parts back, which read this buffer, is done
                buf.store(x.to(c_desc.dtype))
                fence_async_shared()
                tma.async_copy_shared_to_global(c_desc, [off_m, off_n + i * EPI_N], buf)
        tma.store_wait(pendings=0)

    @gluon.jit
    def gemm_ws_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, M, N, K, stride_am, stride_b, stride_cm, stride_rm,
                       B_KMAJOR: gl.constexpr, HAS_BIAS: gl.constexpr, GELU: gl.constexpr, HAS_RES: gl.constexpr,
                       NUM_WARPS: gl.constexpr):
        # Persistent and warp-specialised (Hopper): a loader warp keeps a 4-stage TMA ring full while the
        # consumers' epilogue of one tile overlaps the loads of the next.
        BLOCK_M: gl.constexpr = 128
        BLOCK_N: gl.constexpr = 256
        BLOCK_K: gl.constexpr = 64
        EPI_N: gl.constexpr = 64
        STAGES: gl.constexpr = 4
        GROUP_M: gl.constexpr = 8
        dtype: gl.constexpr = a_ptr.dtype.element_ty
        # Descriptors made on the device: the launch takes plain pointers. Triton's host path for descriptor
        # arguments (a tensor map encoded per call) took 100-200 us per call, more than the GEMM itself.
        a_desc = tma.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K],
                                            gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype))
        if B_KMAJOR:  # nn.Linear's weight, (N, K)
            b_desc = tma.make_tensor_descriptor(b_ptr, [N, K], [stride_b, 1], [BLOCK_N, BLOCK_K],
                                                gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_K], dtype))
        else:  # (K, N), read N-major by wgmma itself
            b_desc = tma.make_tensor_descriptor(b_ptr, [K, N], [stride_b, 1], [BLOCK_K, BLOCK_N],
                                                gl.NVMMASharedLayout.get_default_for([BLOCK_K, BLOCK_N], dtype))
        c_desc = tma.make_tensor_descriptor(c_ptr, [M, N], [stride_cm, 1], [BLOCK_M, EPI_N],
                                            gl.NVMMASharedLayout.get_default_for([BLOCK_M, EPI_N], dtype))
        a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
        b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
        c_smem = gl.allocate_shared_memory(dtype, [2] + c_desc.block_type.shape, c_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=1)
        gl.warp_specialize([
            (_ws_consumer, (a_bufs, b_bufs, ready, empty, c_desc, c_smem, bias_ptr, res_ptr, stride_rm, M, N, K,
                            BLOCK_M, BLOCK_N, BLOCK_K, EPI_N, STAGES, GROUP_M, B_KMAJOR, HAS_BIAS, GELU, HAS_RES,
                            NUM_WARPS)),
            (_ws_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, STAGES,
                          GROUP_M, B_KMAJOR)),
        ], [1], [40])


_HOPPER = {}  # device index -> (is an sm_90 GPU, its SM count)
_GLUON_FAILED = []  # the installed Triton's Gluon could not build the kernel: the portable GEMM from then on


def _scratch(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _gluon_operand(b):
    """(tensor, k-major) for the Gluon kernel's B, or None: (K, N) with n contiguous, or a transposed (N, K)."""
    if b.stride(1) == 1:
        return b, False
    if b.stride(0) == 1:
        return b.t(), True
    return None


def _gluon_gemm(a, b, bias, gelu, residual):
    """The Hopper kernel where it applies (else None): bf16/fp16, TMA-addressable operands (16-byte aligned
    bases and row pitches), on an sm_90 GPU."""
    if gluon is None or _GLUON_FAILED or not a.is_cuda or a.dtype not in (torch.bfloat16, torch.float16):
        return None
    dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if dev not in _HOPPER:
        props = torch.cuda.get_device_properties(dev)
        _HOPPER[dev] = ((props.major, props.minor) == (9, 0), props.multi_processor_count)
    hopper, sms = _HOPPER[dev]
    op = _gluon_operand(b)
    M, K = a.shape
    N = b.shape[1]
    if not hopper or op is None or b.dtype != a.dtype or a.stride(1) != 1 or K % 8 or N % 8:
        return None
    bt, kmajor = op
    if a.data_ptr() % 16 or bt.data_ptr() % 16 or a.stride(0) % 8 or bt.stride(0) % 8:
        return None
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    triton.set_allocator(_scratch)  # a context variable (the descriptors' scratch): set on the calling thread
    grid = (min(triton.cdiv(M, 128) * triton.cdiv(N, 256), sms), )
    try:
        gemm_ws_kernel[grid](a, bt, c, bias if bias is not None else c, residual if residual is not None else c,
                             M, N, K, a.stride(0), bt.stride(0), c.stride(0),
                             residual.stride(0) if residual is not None else 0, B_KMAJOR=kmajor,
                             HAS_BIAS=bias is not None, GELU=gelu, HAS_RES=residual is not None, NUM_WARPS=8,
                             num_warps=8)
    except Exception as exc:  # noqa: BLE001 - a Gluon API this kernel was not written for: the portable path
        if "CompilationError" not in type(exc).__name__:
            raise
        _GLUON_FAILED.append(exc)
        return None
    return c


def gemm(a, b, bias=None, gelu=False, residual=None):
    """a (M, K) @ b (K, N) in a's dtype; b may be a transposed view (nn.Linear's weight.t()), unit-stride along
    k or n; fused epilogue. On an H100 the Gluon kernel above; elsewhere (other GPUs, operands TMA cannot
    address, Triton's interpreter) the portable tl.dot kernel: 128 x 256 x 64 tiles, 3 stages, 8 warps."""
    M, K = a.shape
    N = b.shape[1]
    if residual is not None:
        assert residual.shape == (M, N) and residual.stride(1) == 1
    c = _gluon_gemm(a, b, bias, gelu, residual)
    if c is not None:
        return c
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    gemm_kernel[grid](a, b, c, bias if bias is not None else c, residual if residual is not None else c,
                      M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                      residual.stride(0) if residual is not None else 0,
                      HAS_BIAS=bias is not None, GELU=gelu, HAS_RES=residual is not None,
                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8, num_warps=8, num_stages=3)
    return c


class ModelNew(nn.Module):
    """Pre-norm MLP block in bf16: LayerNorm (fp32 statistics) -> GEMM with bias + GELU in its epilogue ->
    GEMM with bias + the residual in its epilogue; both GEMMs on the tensor cores with fp32 accumulation."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        h = layernorm(x2d, self.norm)
        hid = gemm(h, self.fc1.weight.t(), bias=self.fc1.bias, gelu=True)
        out = gemm(hid, self.fc2.weight.t(), bias=self.fc2.bias, residual=x2d)
        return out.view(x.shape)

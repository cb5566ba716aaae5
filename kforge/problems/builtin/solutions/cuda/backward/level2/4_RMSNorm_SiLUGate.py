# Hand-written solution (kforge's oracle, not an LLM): the gated RMSNorm's forward and backward as CUDA kernels
# behind a torch.autograd.Function, for the backward mode (verify.backward=true).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <cstdint>
#include <cmath>
#include <algorithm>

static const char* launch_status() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum of v over the block (blockDim.x a multiple of 32), returned to every thread.
__device__ float block_sum(float v, float* red /* __shared__ [32] */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < nwarps ? red[lane] : 0.f);
}

__global__ void column_finish_kernel(const float* __restrict__ part, float* __restrict__ out, int slices, int64_t D) {
    const int64_t col = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= D) return;
    float s = 0.f;
    for (int k = 0; k < slices; ++k) s += part[(int64_t)k * D + col];
    out[col] = s;
}

// Row slices for a two-stage column reduction: about a thousand blocks in all, at least 64 rows a slice.
static int row_slices(int64_t rows, int64_t D) {
    const int64_t col_blocks = (D + 31) / 32;
    return (int)std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(1, 1024 / col_blocks), (rows + 63) / 64));
}

static int row_threads(int64_t D) { return D >= 4096 ? 512 : (D >= 1024 ? 256 : 128); }

__device__ __forceinline__ float sigmoidf(float v) { return 1.f / (1.f + expf(-v)); }

// One block per row: out = x * r * w * silu(g), r = rsqrt(mean(x^2) + eps), kept for the backward.
__global__ void gate_fwd_kernel(const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ w,
                                float* __restrict__ out, float* __restrict__ r_out, int64_t D, float eps) {
    __shared__ float red[32];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t off = (int64_t)blockIdx.x * D;
    float q = 0.f;
    for (int64_t i = tid; i < D; i += nt) { const float v = x[off + i]; q += v * v; }
    const float r = rsqrtf(block_sum(q, red) / (float)D + eps);
    if (tid == 0) r_out[blockIdx.x] = r;
    for (int64_t i = tid; i < D; i += nt) {
        const float gv = g[off + i];
        out[off + i] = x[off + i] * r * w[i] * (gv * sigmoidf(gv));
    }
}

// One block per row. With u = dy * w * silu(g): dx = r * u - r^3 * x * mean(u * x);
// dg = dy * x * r * w * silu'(g), silu'(g) = s * (1 + g * (1 - s)), s = sigmoid(g).
__global__ void gate_bwd_rows_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                     const float* __restrict__ g, const float* __restrict__ w,
                                     const float* __restrict__ rr, float* __restrict__ dx, float* __restrict__ dg,
                                     int64_t D) {
    __shared__ float red[32];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t off = (int64_t)blockIdx.x * D;
    const float r = rr[blockIdx.x];
    float a = 0.f;
    for (int64_t i = tid; i < D; i += nt) {
        const float gv = g[off + i];
        a += dy[off + i] * w[i] * gv * sigmoidf(gv) * x[off + i];
    }
    const float k = r * r * r * block_sum(a, red) / (float)D;
    for (int64_t i = tid; i < D; i += nt) {
        const float gv = g[off + i], s = sigmoidf(gv), d = dy[off + i], xv = x[off + i];
        dx[off + i] = r * d * w[i] * gv * s - k * xv;
        dg[off + i] = d * xv * r * w[i] * s * (1.f + gv * (1.f - s));
    }
}

// dw = sum over rows of dy * x * r * silu(g), in two stages as ln_dwdb_partial_kernel (32 columns x a row slice
// per block, then column_finish_kernel adds the slices in order).
__global__ void gate_dw_partial_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                       const float* __restrict__ g, const float* __restrict__ rr,
                                       float* __restrict__ pw, int64_t rows, int64_t D) {
    __shared__ float sw[8][33];
    const int64_t col = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (col < D)
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < rows; r += (int64_t)gridDim.y * 8) {
            const int64_t k = r * D + col;
            const float gv = g[k];
            acc += dy[k] * x[k] * rr[r] * gv * sigmoidf(gv);
        }
    sw[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < D) {
        float t = 0.f;
        #pragma unroll
        for (int k = 0; k < 8; ++k) t += sw[k][threadIdx.x];
        pw[(int64_t)blockIdx.y * D + col] = t;
    }
}

const char* gate_fwd_launch(const float* x, const float* g, const float* w, float* out, float* r, int64_t rows,
                            int64_t D, float eps) {
    if (rows == 0 || D == 0) return nullptr;
    gate_fwd_kernel<<<(unsigned)rows, row_threads(D)>>>(x, g, w, out, r, D, eps);
    return launch_status();
}

const char* gate_bwd_launch(const float* dy, const float* x, const float* g, const float* w, const float* r,
                            float* dx, float* dg, float* dw, float* pw, int slices, int64_t rows, int64_t D) {
    if (rows == 0 || D == 0) return nullptr;
    gate_bwd_rows_kernel<<<(unsigned)rows, row_threads(D)>>>(dy, x, g, w, r, dx, dg, D);
    gate_dw_partial_kernel<<<dim3((unsigned)((D + 31) / 32), (unsigned)slices), dim3(32, 8)>>>(dy, x, g, r, pw, rows, D);
    column_finish_kernel<<<(unsigned)((D + 255) / 256), 256>>>(pw, dw, slices, D);
    return launch_status();
}

int gate_row_slices(int64_t rows, int64_t D) { return row_slices(rows, D); }
"""

cpp_source = r"""
#include <vector>

static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* gate_fwd_launch(const float* x, const float* g, const float* w, float* out, float* r, int64_t rows,
                            int64_t D, float eps);
const char* gate_bwd_launch(const float* dy, const float* x, const float* g, const float* w, const float* r,
                            float* dx, float* dg, float* dw, float* pw, int slices, int64_t rows, int64_t D);
int gate_row_slices(int64_t rows, int64_t D);

std::vector<torch::Tensor> gate_forward(torch::Tensor x, torch::Tensor g, torch::Tensor weight, double eps) {
    check_f32_cuda(x, "x");
    check_f32_cuda(g, "g");
    check_f32_cuda(weight, "weight");
    TORCH_CHECK(x.sizes() == g.sizes(), "x and g must have the same shape");
    const int64_t D = x.size(-1);
    TORCH_CHECK(D > 0 && weight.numel() == D, "weight size mismatch");
    auto xc = x.contiguous(), gc = g.contiguous(), wc = weight.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / D;
    auto r = torch::empty({rows}, xc.options());
    const char* err = gate_fwd_launch(xc.data_ptr<float>(), gc.data_ptr<float>(), wc.data_ptr<float>(),
                                      out.data_ptr<float>(), r.data_ptr<float>(), rows, D, (float)eps);
    TORCH_CHECK(err == nullptr, "gated rmsnorm forward kernel failed: ", err);
    return {out, r};
}

std::vector<torch::Tensor> gate_backward(torch::Tensor dy, torch::Tensor x, torch::Tensor g, torch::Tensor weight,
                                         torch::Tensor r) {
    check_f32_cuda(dy, "grad");
    auto dyc = dy.contiguous(), xc = x.contiguous(), gc = g.contiguous(), wc = weight.contiguous();
    const int64_t D = xc.size(-1), rows = xc.numel() / D;
    const int slices = gate_row_slices(rows, D);
    auto dx = torch::empty_like(xc), dg = torch::empty_like(xc);
    auto dw = torch::empty({D}, xc.options());
    auto pw = torch::empty({slices, D}, xc.options());
    const char* err = gate_bwd_launch(dyc.data_ptr<float>(), xc.data_ptr<float>(), gc.data_ptr<float>(),
                                      wc.data_ptr<float>(), r.data_ptr<float>(), dx.data_ptr<float>(),
                                      dg.data_ptr<float>(), dw.data_ptr<float>(), pw.data_ptr<float>(), slices, rows, D);
    TORCH_CHECK(err == nullptr, "gated rmsnorm backward kernels failed: ", err);
    return {dx, dg, dw};
}
"""

_ext = load_inline(name="kf_oracle_cuda_rmsnorm_silu_gate_bwd", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["gate_forward", "gate_backward"], extra_cuda_cflags=["-O3"], verbose=False)


class GatedRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g, weight, eps):
        out, r = _ext.gate_forward(x, g, weight, eps)
        ctx.save_for_backward(x, g, weight, r)
        return out

    @staticmethod
    def backward(ctx, dy):
        x, g, weight, r = ctx.saved_tensors
        dx, dg, dw = _ext.gate_backward(dy, x, g, weight, r)
        return dx, dg, dw, None


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))  # the reference's parameter, by the same name

    def forward(self, x, g):
        return GatedRMSNormFunction.apply(x, g, self.weight, self.eps)

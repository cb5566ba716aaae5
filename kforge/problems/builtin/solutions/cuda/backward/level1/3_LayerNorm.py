# Hand-written solution (kforge's oracle, not an LLM): LayerNorm's forward and backward as CUDA kernels behind a
# torch.autograd.Function, for the backward mode (verify.backward=true).
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

// One block per row: y = (x - mean) * rstd * w + b; keeps the row's mean and 1/std for the backward.
__global__ void ln_fwd_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                              float* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                              int64_t D, float eps) {
    __shared__ float red[32];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t row = blockIdx.x;
    const float* xr = x + row * D;
    float* yr = y + row * D;
    float s = 0.f;
    for (int64_t i = tid; i < D; i += nt) s += xr[i];
    const float mean = block_sum(s, red) / (float)D;
    float q = 0.f;
    for (int64_t i = tid; i < D; i += nt) { const float d = xr[i] - mean; q += d * d; }
    const float rstd = rsqrtf(block_sum(q, red) / (float)D + eps);  // biased variance, as nn.LayerNorm
    if (tid == 0) { mean_out[row] = mean; rstd_out[row] = rstd; }
    for (int64_t i = tid; i < D; i += nt) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

// One block per row: dx = res + rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)) (res: a residual's gradient
// added in the same pass, or nullptr).
__global__ void ln_bwd_dx_kernel(const float* __restrict__ g, const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ mean, const float* __restrict__ rstd,
                                 const float* __restrict__ res, float* __restrict__ dx, int64_t D) {
    __shared__ float red[32];
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t row = blockIdx.x;
    const float *gr = g + row * D, *xr = x + row * D;
    const float mu = mean[row], rs = rstd[row];
    float a1 = 0.f, a2 = 0.f;
    for (int64_t i = tid; i < D; i += nt) {
        const float gw = gr[i] * w[i];
        a1 += gw;
        a2 += gw * (xr[i] - mu) * rs;
    }
    const float c1 = block_sum(a1, red) / (float)D;
    const float c2 = block_sum(a2, red) / (float)D;
    float* dr = dx + row * D;
    const float* rr = res ? res + row * D : nullptr;
    for (int64_t i = tid; i < D; i += nt) {
        const float v = rs * (gr[i] * w[i] - c1 - (xr[i] - mu) * rs * c2);
        dr[i] = rr ? rr[i] + v : v;
    }
}

// dw = sum over rows of g * xhat, db = sum of g, in two stages: blocks of 32 x 8 threads own 32 columns and a
// slice of the rows (threadIdx.x: the column, coalesced; threadIdx.y: the row), write one partial sum per slice,
// and column_finish adds the slices in order (no atomics: the same result every run).
__global__ void ln_dwdb_partial_kernel(const float* __restrict__ g, const float* __restrict__ x,
                                       const float* __restrict__ mean, const float* __restrict__ rstd,
                                       float* __restrict__ pw, float* __restrict__ pb, int64_t rows, int64_t D) {
    __shared__ float sw[8][33], sb[8][33];
    const int64_t col = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float aw = 0.f, ab = 0.f;
    if (col < D)
        for (int64_t r = (int64_t)blockIdx.y * 8 + threadIdx.y; r < rows; r += (int64_t)gridDim.y * 8) {
            const float gv = g[r * D + col];
            aw += gv * (x[r * D + col] - mean[r]) * rstd[r];
            ab += gv;
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && col < D) {
        float tw = 0.f, tb = 0.f;
        #pragma unroll
        for (int k = 0; k < 8; ++k) { tw += sw[k][threadIdx.x]; tb += sb[k][threadIdx.x]; }
        pw[(int64_t)blockIdx.y * D + col] = tw;
        pb[(int64_t)blockIdx.y * D + col] = tb;
    }
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

const char* ln_fwd_launch(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                          int64_t rows, int64_t D, float eps) {
    if (rows == 0 || D == 0) return nullptr;
    ln_fwd_kernel<<<(unsigned)rows, row_threads(D)>>>(x, w, b, y, mean, rstd, D, eps);
    return launch_status();
}

const char* ln_bwd_launch(const float* g, const float* x, const float* w, const float* mean, const float* rstd,
                          float* dx, float* dw, float* db, float* pw, float* pb, int slices, int64_t rows,
                          int64_t D) {
    if (rows == 0 || D == 0) return nullptr;
    ln_bwd_dx_kernel<<<(unsigned)rows, row_threads(D)>>>(g, x, w, mean, rstd, nullptr, dx, D);
    ln_dwdb_partial_kernel<<<dim3((unsigned)((D + 31) / 32), (unsigned)slices), dim3(32, 8)>>>(g, x, mean, rstd, pw, pb,
                                                                                              rows, D);
    const unsigned fin = (unsigned)((D + 255) / 256);
    column_finish_kernel<<<fin, 256>>>(pw, dw, slices, D);
    column_finish_kernel<<<fin, 256>>>(pb, db, slices, D);
    return launch_status();
}

int ln_row_slices(int64_t rows, int64_t D) { return row_slices(rows, D); }
"""

cpp_source = r"""
#include <vector>

static void check_f32_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
}

const char* ln_fwd_launch(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                          int64_t rows, int64_t D, float eps);
const char* ln_bwd_launch(const float* g, const float* x, const float* w, const float* mean, const float* rstd,
                          float* dx, float* dw, float* db, float* pw, float* pb, int slices, int64_t rows,
                          int64_t D);
int ln_row_slices(int64_t rows, int64_t D);

std::vector<torch::Tensor> layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    check_f32_cuda(x, "x");
    check_f32_cuda(weight, "weight");
    check_f32_cuda(bias, "bias");
    const int64_t D = x.size(-1);
    TORCH_CHECK(D > 0 && weight.numel() == D && bias.numel() == D, "weight/bias size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto out = torch::empty_like(xc);
    const int64_t rows = xc.numel() / D;
    auto mean = torch::empty({rows}, xc.options());
    auto rstd = torch::empty({rows}, xc.options());
    const char* err = ln_fwd_launch(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                                    out.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(), rows, D,
                                    (float)eps);
    TORCH_CHECK(err == nullptr, "layernorm forward kernel failed: ", err);
    return {out, mean, rstd};
}

std::vector<torch::Tensor> layernorm_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor weight,
                                              torch::Tensor mean, torch::Tensor rstd) {
    check_f32_cuda(grad, "grad");
    auto gc = grad.contiguous();
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    const int64_t D = xc.size(-1), rows = xc.numel() / D;
    const int slices = ln_row_slices(rows, D);
    auto dx = torch::empty_like(xc);
    auto dw = torch::empty({D}, xc.options());
    auto db = torch::empty({D}, xc.options());
    auto pw = torch::empty({slices, D}, xc.options());
    auto pb = torch::empty({slices, D}, xc.options());
    const char* err = ln_bwd_launch(gc.data_ptr<float>(), xc.data_ptr<float>(), wc.data_ptr<float>(),
                                    mean.data_ptr<float>(), rstd.data_ptr<float>(), dx.data_ptr<float>(),
                                    dw.data_ptr<float>(), db.data_ptr<float>(), pw.data_ptr<float>(),
                                    pb.data_ptr<float>(), slices, rows, D);
    TORCH_CHECK(err == nullptr, "layernorm backward kernels failed: ", err);
    return {dx, dw, db};
}
"""

_ext = load_inline(name="kf_oracle_cuda_layernorm_bwd", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["layernorm_forward", "layernorm_backward"], extra_cuda_cflags=["-O3"], verbose=False)


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = _ext.layernorm_forward(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = _ext.layernorm_backward(grad, x, weight, mean, rstd)
        return dx, dw, db, None


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)  # the reference's parameters, by the same names

    def forward(self, x):
        return LayerNormFunction.apply(x, self.norm.weight, self.norm.bias, self.norm.eps)

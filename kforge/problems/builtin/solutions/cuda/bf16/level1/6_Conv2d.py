import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# nn.Conv2d in bf16: an implicit GEMM on the tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulators,
# 4-stage cp.async pipeline). Two small passes first put the input in NHWC (channels padded to a multiple of 8)
# and the weight in (Cout, KH, KW, C8), so that the GEMM's k runs along memory in 16-byte chunks; padding pixels
# load as zeros. The epilogue adds the bias to the fp32 accumulators and rounds once to bf16, writing NCHW.
cuda_source = r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

typedef __nv_bfloat16 bf16;

static const char* launch_status() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

static bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// ---- tensor-core primitives (sm_80+): cp.async, ldmatrix, mma.sync m16n8k16 bf16 -> fp32 ----------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, asynchronously; src_bytes 0 writes zeros (rows or k past the edge).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
// d += a (16x16, row) * b (16x8, col), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- tiles of a bf16 GEMM with fp32 accumulation ------------------------------------------------------------
// Block tile 128 x 128 x 32 through a 4-stage cp.async pipeline; 8 warps as 2 (m) x 4 (n), each warp
// 64 x 32 = 4 x 4 mma tiles of 16 x 8. Shared-memory rows are padded by 16 bytes so that ldmatrix's eight
// row reads hit distinct banks. Rows and k past the edges load as zeros.
constexpr int BM = 128, BN = 128, BK = 32, STAGES = 4, THREADS = 256;
constexpr int LDK = BK + 8;  // pitch (elements) of a k-contiguous tile row: 80 bytes

// rows r0.. (of nrows) of a k-contiguous matrix, columns k0..k0+BK -> tile[ROWS][LDK]
template <int ROWS>
__device__ __forceinline__ void load_rows_k(bf16* tile, const bf16* __restrict__ src, int64_t ld, int nrows, int K,
                                            int r0, int k0, bool vec) {
    constexpr int PER_ROW = BK / 8;
    #pragma unroll
    for (int i = 0; i < ROWS * PER_ROW / THREADS; ++i) {
        const int c = threadIdx.x + i * THREADS;
        const int r = c / PER_ROW, kc = (c % PER_ROW) * 8;
        const int row = r0 + r, k = k0 + kc;
        bf16* dst = tile + r * LDK + kc;
        if (vec) {  // K % 8 == 0: a chunk is all in range or all out
            const bool ok = row < nrows && k < K;
            cp_async16(dst, ok ? src + (int64_t)row * ld + k : src, ok ? 16 : 0);
        } else {
            #pragma unroll
            for (int j = 0; j < 8; ++j)
                dst[j] = (row < nrows && k + j < K) ? src[(int64_t)row * ld + k + j] : __float2bfloat16(0.f);
        }
    }
}


// ---- layout passes: NCHW -> NHWC with channels padded to a multiple of 8; OIHW weight -> (O, KH, KW, C8) -----
// In NHWC a pixel's channels are contiguous, so the implicit GEMM below reads its k (= (kh, kw, c)) in 16-byte
// chunks of 8 channels. Through a shared-memory tile: reads coalesce along w, writes along c.
__global__ void nchw_to_nhwc8_kernel(const bf16* __restrict__ x, bf16* __restrict__ xh, int C, int H, int W, int C8) {
    __shared__ bf16 tile[32][64 + 2];
    const int w0 = blockIdx.x * 64, h = blockIdx.y, n = blockIdx.z;
    for (int c0 = 0; c0 < C8; c0 += 32) {
        for (int i = threadIdx.x; i < 32 * 64; i += blockDim.x) {
            const int c = i / 64, w = i % 64;
            tile[c][w] = (c0 + c < C && w0 + w < W) ? x[(((int64_t)n * C + c0 + c) * H + h) * W + w0 + w]
                                                    : __float2bfloat16(0.f);
        }
        __syncthreads();
        for (int i = threadIdx.x; i < 32 * 64; i += blockDim.x) {
            const int w = i / 32, c = i % 32;
            if (w0 + w < W && c0 + c < C8) xh[(((int64_t)n * H + h) * W + w0 + w) * C8 + c0 + c] = tile[c][w];
        }
        __syncthreads();
    }
}

__global__ void weight_okkc_kernel(const bf16* __restrict__ w, bf16* __restrict__ wk, int Cout, int C, int KH, int KW,
                                   int C8) {
    const int64_t total = (int64_t)Cout * KH * KW * C8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C8);
        const int64_t r = i / C8;
        const int kw = (int)(r % KW), kh = (int)((r / KW) % KH), o = (int)(r / ((int64_t)KW * KH));
        wk[i] = c < C ? w[(((int64_t)o * C + c) * KH + kh) * KW + kw] : __float2bfloat16(0.f);
    }
}

// ---- implicit GEMM: out[co][pixel] = sum_k wk[co][k] * im2col[pixel][k] (+ bias) (-> ReLU + 2x2 max-pool) ------
// M = output channels, N = output pixels, K = KH * KW * C8, on the GEMM above's machinery (128 x 128 x 32 tiles,
// 4-stage cp.async pipeline, 8 warps of 64 x 32, mma.sync bf16 -> fp32). A block's 128 pixels are 2 output rows
// x 64 columns: pixel p is row r = (p / 8) % 2, column jj * 8 + p % 8 with jj = p / 16, so a thread's fragments
// of n8 tiles 2i and 2i + 1 hold the same columns of both rows, i.e. whole 2 x 2 pooling windows.
struct ConvArgs {
    const bf16* xh;    // (NB, H, W, C8)
    const bf16* wk;    // (Cout, Ktot), Ktot = KH * KW * C8
    const bf16* bias;  // (Cout)
    bf16* out;         // (NB, Cout, Ho, Wo), or (NB, Cout, Ho / 2, Wo / 2) when pooled
    int H, W, C8, Cout, KH, KW, pad_h, pad_w, Ho, Wo, Ktot, co_tiles;
    int pair;          // 2-element stores of the unpooled output are aligned (Wo even)
};

template <bool POOL>
__global__ void __launch_bounds__(THREADS, 2) conv_bf16_kernel(ConvArgs p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int A_STAGE = BM * LDK, B_STAGE = BN * LDK;
    bf16* As = reinterpret_cast<bf16*>(smem_raw);
    bf16* Bs = As + STAGES * A_STAGE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    const int n = blockIdx.z / p.co_tiles, m0 = (blockIdx.z % p.co_tiles) * BM;
    const int h0 = blockIdx.y * 2, w0 = blockIdx.x * 64;
    const bf16* ximg = p.xh + (int64_t)n * p.H * p.W * p.C8;

    float acc[4][4][4];
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    auto load_pixels = [&](bf16* tile, int k0) {
        #pragma unroll
        for (int i = 0; i < BN * (BK / 8) / THREADS; ++i) {
            const int c = threadIdx.x + i * THREADS;
            const int px = c / (BK / 8), kc = (c % (BK / 8)) * 8, k = k0 + kc;
            const int oh = h0 + (px / 8) % 2, ow = w0 + (px / 16) * 8 + px % 8;
            const int tap = k / p.C8, ci = k % p.C8;  // C8 % 8 == 0: a chunk never straddles two taps
            const int ih = oh + tap / p.KW - p.pad_h, iw = ow + tap % p.KW - p.pad_w;
            const bool ok = k < p.Ktot && oh < p.Ho && ow < p.Wo && ih >= 0 && ih < p.H && iw >= 0 && iw < p.W;
            cp_async16(tile + px * LDK + kc, ok ? ximg + ((int64_t)ih * p.W + iw) * p.C8 + ci : p.xh, ok ? 16 : 0);
        }
    };
    const int ktiles = (p.Ktot + BK - 1) / BK;
    auto load_stage = [&](int s, int kt) {
        load_rows_k<BM>(As + s * A_STAGE, p.wk, p.Ktot, p.Cout, p.Ktot, m0, kt * BK, true);
        load_pixels(Bs + s * B_STAGE, kt * BK);
    };
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kt + STAGES - 1 < ktiles) load_stage((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
        cp_async_commit();
        const bf16* as = As + (kt % STAGES) * A_STAGE;
        const bf16* bs = Bs + (kt % STAGES) * B_STAGE;
        #pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t a[4][4], b[4][2];
            #pragma unroll
            for (int mi = 0; mi < 4; ++mi)
                ldmatrix_x4(a[mi], as + (wm + mi * 16 + (lane % 16)) * LDK + kk + (lane / 16) * 8);
            #pragma unroll
            for (int nj = 0; nj < 2; ++nj) {
                uint32_t r[4];
                ldmatrix_x4(r, bs + (wn + nj * 16 + (lane % 8) + (lane / 16) * 8) * LDK + kk + ((lane / 8) % 2) * 8);
                b[2 * nj][0] = r[0]; b[2 * nj][1] = r[1]; b[2 * nj + 1][0] = r[2]; b[2 * nj + 1][1] = r[3];
            }
            #pragma unroll
            for (int mi = 0; mi < 4; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
    }
    cp_async_wait<0>();

    // thread holds channels g, g + 8 of each 16-row tile and pixels 2t, 2t + 1 of each 8-pixel tile; n8 tile ni
    // of this warp is output row h0 + ni % 2, columns w0 + jj * 8 + 2t (+1) with jj = 2 * (warp % 4) + ni / 2
    const int g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int mi = 0; mi < 4; ++mi)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int co = m0 + wm + mi * 16 + g + half * 8;
            if (co >= p.Cout) continue;
            const float bco = __bfloat162float(p.bias[co]);
            if (POOL) {
                const int Hp = p.Ho / 2, Wp = p.Wo / 2, ph = h0 / 2;
                #pragma unroll
                for (int pair = 0; pair < 2; ++pair) {
                    const int pw = (w0 + (2 * (warp % 4) + pair) * 8 + 2 * t) / 2;
                    if (ph >= Hp || pw >= Wp) continue;
                    const float* top = acc[mi][2 * pair];
                    const float* bot = acc[mi][2 * pair + 1];
                    const float v = fmaxf(fmaxf(top[2 * half], top[2 * half + 1]),
                                          fmaxf(bot[2 * half], bot[2 * half + 1]));
                    // relu(max(v) + b) == max over the window of relu(v + b)
                    p.out[(((int64_t)n * p.Cout + co) * Hp + ph) * Wp + pw] = __float2bfloat16(fmaxf(v + bco, 0.f));
                }
            } else {
                #pragma unroll
                for (int ni = 0; ni < 4; ++ni) {
                    const int oh = h0 + ni % 2, ow = w0 + (2 * (warp % 4) + ni / 2) * 8 + 2 * t;
                    if (oh >= p.Ho || ow >= p.Wo) continue;
                    const float v0 = acc[mi][ni][2 * half] + bco, v1 = acc[mi][ni][2 * half + 1] + bco;
                    bf16* o = p.out + (((int64_t)n * p.Cout + co) * p.Ho + oh) * p.Wo + ow;
                    if (ow + 1 < p.Wo && p.pair) {
                        *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(v0, v1);
                    } else {
                        o[0] = __float2bfloat16(v0);
                        if (ow + 1 < p.Wo) o[1] = __float2bfloat16(v1);
                    }
                }
            }
        }
}

// Stride-1 convolution of x (NB, C, H, W) by w (Cout, C, KH, KW) with zero padding, plus bias; pool: then ReLU
// and 2x2 max-pooling (stride 2, floor). xh, wk: scratch of NB*H*W*C8 and Cout*KH*KW*C8 elements, C8 = C
// rounded up to 8. Returns nullptr or the CUDA error.
const char* conv2d_bf16(const void* x, const void* w, const void* bias, void* out, void* xh, void* wk, int NB, int C,
                        int H, int W, int Cout, int KH, int KW, int pad_h, int pad_w, bool pool) {
    const int C8 = (C + 7) / 8 * 8, Ho = H + 2 * pad_h - KH + 1, Wo = W + 2 * pad_w - KW + 1;
    const int rows = pool ? Ho / 2 : (Ho + 1) / 2, cols = pool ? 2 * (Wo / 2) : Wo;  // output rows in pairs
    if (NB == 0 || Cout == 0 || rows <= 0 || cols <= 0) return nullptr;
    if (!aligned16(xh) || !aligned16(wk)) return "the layout scratch buffers must be 16-byte aligned (cp.async)";
    nchw_to_nhwc8_kernel<<<dim3((W + 63) / 64, H, NB), 256>>>(static_cast<const bf16*>(x), static_cast<bf16*>(xh), C,
                                                                H, W, C8);
    const int64_t wtotal = (int64_t)Cout * KH * KW * C8;
    weight_okkc_kernel<<<(unsigned)std::min<int64_t>((wtotal + 255) / 256, 4096), 256>>>(
        static_cast<const bf16*>(w), static_cast<bf16*>(wk), Cout, C, KH, KW, C8);
    const char* err = launch_status();
    if (err) return err;
    ConvArgs p{static_cast<const bf16*>(xh), static_cast<const bf16*>(wk), static_cast<const bf16*>(bias),
               static_cast<bf16*>(out), H, W, C8, Cout, KH, KW, pad_h, pad_w, Ho, Wo, KH * KW * C8,
               (Cout + BM - 1) / BM, Wo % 2 == 0 && (reinterpret_cast<uintptr_t>(out) & 3) == 0};
    const int smem = STAGES * (BM + BN) * LDK * (int)sizeof(bf16);
    const dim3 grid((cols + 63) / 64, rows, NB * p.co_tiles);
    if (pool) {
        static const cudaError_t attr = cudaFuncSetAttribute(conv_bf16_kernel<true>,
                                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (attr != cudaSuccess) return cudaGetErrorString(attr);
        conv_bf16_kernel<true><<<grid, THREADS, smem>>>(p);
    } else {
        static const cudaError_t attr = cudaFuncSetAttribute(conv_bf16_kernel<false>,
                                                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (attr != cudaSuccess) return cudaGetErrorString(attr);
        conv_bf16_kernel<false><<<grid, THREADS, smem>>>(p);
    }
    return launch_status();
}
"""

cpp_source = r"""
static void check_bf16_cuda(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == torch::kBFloat16, name, " must be bfloat16 (this is the bf16 solution), got ",
                t.scalar_type());
}

const char* conv2d_bf16(const void* x, const void* w, const void* bias, void* out, void* xh, void* wk, int NB, int C,
                        int H, int W, int Cout, int KH, int KW, int pad_h, int pad_w, bool pool);

torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad_h, int64_t pad_w) {
    check_bf16_cuda(x, "x");
    check_bf16_cuda(weight, "weight");
    check_bf16_cuda(bias, "bias");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1), "NCHW input, OIHW weight");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    const int64_t NB = xc.size(0), C = xc.size(1), H = xc.size(2), W = xc.size(3);
    const int64_t Cout = wc.size(0), KH = wc.size(2), KW = wc.size(3);
    const int64_t Ho = H + 2 * pad_h - KH + 1, Wo = W + 2 * pad_w - KW + 1, C8 = (C + 7) / 8 * 8;
    TORCH_CHECK(Ho > 0 && Wo > 0 && bc.numel() == Cout, "bad sizes");
    auto out = torch::empty({NB, Cout, Ho, Wo}, xc.options());
    auto xh = torch::empty({NB * H * W * C8}, xc.options());      // NHWC copy of x, channels padded
    auto wk = torch::empty({Cout * KH * KW * C8}, xc.options());  // (Cout, KH, KW, C8) copy of the weight
    const char* err = conv2d_bf16(xc.data_ptr(), wc.data_ptr(), bc.data_ptr(), out.data_ptr(), xh.data_ptr(),
                                  wk.data_ptr(), (int)NB, (int)C, (int)H, (int)W, (int)Cout, (int)KH, (int)KW,
                                  (int)pad_h, (int)pad_w, false);
    TORCH_CHECK(err == nullptr, "convolution kernel failed: ", err);
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cuda_conv2d_bf16", cpp_sources=[cpp_source], cuda_sources=[cuda_source],
                   functions=["conv2d_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=True)

    def forward(self, x):
        c = self.conv
        return _ext.conv2d_forward(x, c.weight, c.bias, c.padding[0], c.padding[1])

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# nn.Conv2d in bf16: an implicit GEMM on the tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulators,
# 4-stage pipeline) that reads x as stored (NCHW). For one channel, the output pixels of a tile lie along w in
# memory, so the x tile is kept [k][pixel] and fed to the mma through ldmatrix.trans; a channels-last copy of x
# first would cost about as much as the convolution itself. Only the small weight gets a layout pass. The
# epilogue adds the bias to the fp32 accumulators, rounds once to bf16 and writes NCHW through shared memory.
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
// 16 bytes global -> shared, asynchronously; src_bytes 0 writes zeros (rows past the edge).
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

// Block tile 128 (output channels) x 128 (output pixels) x 32 (k); 8 warps as 2 (m) x 4 (n), each 64 x 32 =
// 4 x 4 mma tiles of 16 x 8. Shared rows are padded by 16 bytes so that ldmatrix's eight row reads (and the
// 16-byte stores) hit distinct banks.
constexpr int BM = 128, BN = 128, BK = 32, STAGES = 4, THREADS = 256;
constexpr int LDK = BK + 8;  // pitch (elements) of a weight tile row [co][k]: 80 bytes
constexpr int LDN = BN + 8;  // pitch of an x tile row [k][pixel] and of the output staging tile: 272 bytes

// ---- weight pass: OIHW -> (O, K) with k = ((kh * CB + cb) * KW + kw) * BK + c for channel cb * BK + c --------
// Channels are padded to a multiple of BK (zeros), so that every k tile is 32 channels of one tap (kh, kw): the
// x tile's address then depends only on the tap. kw runs fastest over the tiles: the three shifts of one input
// row follow one another and find it in L1.
__global__ void weight_pack_kernel(const bf16* __restrict__ w, bf16* __restrict__ wk, int Cout, int C, int KH,
                                   int KW, int CB) {
    const int64_t total = (int64_t)Cout * KH * KW * CB * BK;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / BK;
        const int c = (int)(i % BK), kw = (int)(r % KW);
        r /= KW;
        const int cb = (int)(r % CB);
        r /= CB;
        const int kh = (int)(r % KH), o = (int)(r / KH), ci = cb * BK + c;
        wk[i] = ci < C ? w[(((int64_t)o * C + ci) * KH + kh) * KW + kw] : __float2bfloat16(0.f);
    }
}

// ---- implicit GEMM: out[co][pixel] = sum_k wk[co][k] * im2col[k][pixel] + bias[co] ---------------------------
// A block's 128 pixels are TH = 128 / TW output rows of TW columns (TW a power of two >= 8, covering Wo when it
// can), so a run of 8 tile pixels is 8 neighbours along one row: one 16-byte chunk of the x tile.
struct ConvArgs {
    const bf16* x;     // (NB, C, H, W)
    const bf16* wk;    // (Cout, Ktot), packed above
    const bf16* bias;  // (Cout)
    bf16* out;         // (NB, Cout, Ho, Wo)
    int C, H, W, Cout, KH, KW, pad_h, pad_w, Ho, Wo, CB, Ktot, co_tiles, tw_log2;
    int vec_out;       // Wo % 8 == 0 and out 16-byte aligned: 8 output pixels store as one 16-byte chunk
};

// VEC: W % 8 == 0 and x 16-byte aligned, so every aligned run of 8 pixels of an input row is one 16-byte load,
// all in the image or all padding. A tap shifts the row by s = kw - pad_w elements, which breaks the alignment
// (and cp.async can't shift), so x goes through registers: two aligned chunks are loaded and funnel-shifted into
// the 8 wanted pixels. Otherwise (odd W) the 8 pixels load one by one. Both zero the padding.
template <bool VEC>
__global__ void __launch_bounds__(THREADS, 2) conv_bf16_kernel(ConvArgs p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int A_STAGE = BM * LDK, B_STAGE = BK * LDN;
    bf16* As = reinterpret_cast<bf16*>(smem_raw);
    bf16* Bs = As + STAGES * A_STAGE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    const int n = blockIdx.z / p.co_tiles, m0 = (blockIdx.z % p.co_tiles) * BM;
    const int lg = p.tw_log2, TW = 1 << lg;
    const int h0 = blockIdx.y * (BN >> lg), w0 = blockIdx.x * TW;
    const bf16* ximg = p.x + (int64_t)n * p.C * p.H * p.W;

    // This thread's share of an x tile: pixels 8 * pc .. 8 * pc + 7 of k rows kr and kr + 16. Consecutive lanes
    // take consecutive chunks of one row, so a warp's loads are 256 contiguous bytes per channel. Addresses are
    // this thread's part (fixed) plus the tile's (uniform: channel block, tap), kept as counters rather than
    // divided out of the tile index (divisions cost issue slots the mma need). Offsets within an image fit int.
    const int pc = threadIdx.x % 16, kr = threadIdx.x / 16;
    const int oh = h0 + ((pc * 8) >> lg), ow0 = w0 + ((pc * 8) & (TW - 1));
    const bool pix_ok = oh < p.Ho && ow0 < p.Wo;
    const int xbase = (kr * p.H + oh) * p.W + ow0, xstep = 16 * p.H * p.W;  // kr + 16: 16 channels on
    int f_kw = 0, f_cb = 0, f_kh = 0;  // tap and channel block of the next tile to fetch
    int f_r = 0;                       // s & 7 of the last fetched tile: where its pixels start in chunk q0
    uint32_t raw[2][8];  // VEC: aligned chunks q0 (words 0-3) and q0 + 8 (words 4-7); else the 8 pixels (0-3)

    auto fetch_x = [&]() {  // global -> registers, for the next k tile
        const int dh = f_kh - p.pad_h, s = f_kw - p.pad_w, sa = s & ~7;  // floor to 8, also for s < 0
        const int cmax = p.C - f_cb * BK - kr;                             // row kr + 16 i is a channel if < cmax
        const bool row_ok = pix_ok && (unsigned)(oh + dh) < (unsigned)p.H;
        const int off = xbase + (f_cb * BK * p.H + dh) * p.W + sa, q0 = ow0 + sa;
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
            const bool ok = row_ok && 16 * i < cmax;
            const bf16* src = ximg + off + i * xstep;
            if (VEC) {
                uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
                if (ok && (unsigned)q0 < (unsigned)p.W) lo = __ldg(reinterpret_cast<const uint4*>(src));
                if (ok && (s & 7) && (unsigned)(q0 + 8) < (unsigned)p.W)
                    hi = __ldg(reinterpret_cast<const uint4*>(src + 8));
                raw[i][0] = lo.x; raw[i][1] = lo.y; raw[i][2] = lo.z; raw[i][3] = lo.w;
                raw[i][4] = hi.x; raw[i][5] = hi.y; raw[i][6] = hi.z; raw[i][7] = hi.w;
            } else {
                const unsigned short* s16 = reinterpret_cast<const unsigned short*>(src) + (s & 7);
                const int iw = q0 + (s & 7);  // = ow0 + s
                #pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint32_t e0 = ok && (unsigned)(iw + 2 * j) < (unsigned)p.W ? __ldg(s16 + 2 * j) : 0u;
                    const uint32_t e1 = ok && (unsigned)(iw + 2 * j + 1) < (unsigned)p.W ? __ldg(s16 + 2 * j + 1) : 0u;
                    raw[i][j] = e0 | (e1 << 16);
                }
            }
        }
        f_r = s & 7;
        if (++f_kw == p.KW) {  // the packing order: kw fastest, then channel block, then kh
            f_kw = 0;
            if (++f_cb == p.CB) f_cb = 0, ++f_kh;
        }
    };
    auto store_x = [&](bf16* tile) {  // registers -> shared x tile [k][pixel], for the last fetched tile
        const int h = f_r >> 1;
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
            uint32_t o[4];
            if (VEC) {
                // words h .. h + 4 of the 16 loaded pixels (selects: a register array can't be indexed at run
                // time), then a 16-bit funnel shift when the offset is odd. A word's low half is the lower pixel.
                uint32_t u[5];
                #pragma unroll
                for (int j = 0; j < 5; ++j)
                    u[j] = h == 0 ? raw[i][j] : h == 1 ? raw[i][j + 1] : h == 2 ? raw[i][j + 2] : raw[i][j + 3];
                #pragma unroll
                for (int j = 0; j < 4; ++j) o[j] = (f_r & 1) ? __funnelshift_r(u[j], u[j + 1], 16) : u[j];
            } else {
                #pragma unroll
                for (int j = 0; j < 4; ++j) o[j] = raw[i][j];
            }
            *reinterpret_cast<uint4*>(tile + (kr + 16 * i) * LDN + pc * 8) = make_uint4(o[0], o[1], o[2], o[3]);
        }
    };
    // weight tile [co][k], asynchronously: rows wr and wr + 64, 8 k from wc; Ktot % BK == 0
    const int wr = threadIdx.x / (BK / 8), wc = (threadIdx.x % (BK / 8)) * 8;
    const int woff = (m0 + wr) * p.Ktot + wc, wstep = (BM / 2) * p.Ktot;
    const bool wok0 = m0 + wr < p.Cout, wok1 = m0 + wr + BM / 2 < p.Cout;
    auto load_w = [&](bf16* tile, int kt) {
        const bf16* src = p.wk + woff + kt * BK;
        cp_async16(tile + wr * LDK + wc, wok0 ? src : p.wk, wok0 ? 16 : 0);
        cp_async16(tile + (wr + BM / 2) * LDK + wc, wok1 ? src + wstep : p.wk, wok1 ? 16 : 0);
    };

    float acc[4][4][4];
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    const int ktiles = p.Ktot / BK;
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) {
            load_w(As + s * A_STAGE, s);
            fetch_x();
            store_x(Bs + s * B_STAGE);
        }
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        // Stage (kt - 1) % STAGES is free now; the x loads for it are in flight during this tile's mma and land
        // in shared memory after them (registers in between).
        const int nt = kt + STAGES - 1;
        const bool more = nt < ktiles;
        if (more) {
            load_w(As + (nt % STAGES) * A_STAGE, nt);
            fetch_x();
        }
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
                // x tile is [k][pixel]: .trans turns its 8 x 8 blocks into the mma's column-major b fragments;
                // matrices 0, 1: k 0-7, 8-15 of pixels 0-7; 2, 3: the same of pixels 8-15
                uint32_t r[4];
                ldmatrix_x4_trans(r, bs + (kk + (lane % 8) + ((lane / 8) % 2) * 8) * LDN + wn + nj * 16 + (lane / 16) * 8);
                b[2 * nj][0] = r[0]; b[2 * nj][1] = r[1]; b[2 * nj + 1][0] = r[2]; b[2 * nj + 1][1] = r[3];
            }
            #pragma unroll
            for (int mi = 0; mi < 4; ++mi)
                #pragma unroll
                for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
        if (more) store_x(Bs + (nt % STAGES) * B_STAGE);
    }
    cp_async_wait<0>();
    __syncthreads();  // the pipeline's shared memory becomes the output tile

    // Thread holds channels g, g + 8 of each 16-row tile and pixels 2t, 2t + 1 of each 8-pixel tile: add the
    // bias in fp32, round once, stage [co][pixel] so that the stores below are whole 16-byte runs along w.
    bf16* Cs = reinterpret_cast<bf16*>(smem_raw);
    const int g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int mi = 0; mi < 4; ++mi)
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int cl = wm + mi * 16 + g + half * 8;
            const float bco = m0 + cl < p.Cout ? __bfloat162float(p.bias[m0 + cl]) : 0.f;
            #pragma unroll
            for (int ni = 0; ni < 4; ++ni)
                *reinterpret_cast<__nv_bfloat162*>(Cs + cl * LDN + wn + ni * 8 + 2 * t) =
                    __floats2bfloat162_rn(acc[mi][ni][2 * half] + bco, acc[mi][ni][2 * half + 1] + bco);
        }
    __syncthreads();
    #pragma unroll
    for (int i = 0; i < BM * BN / 8 / THREADS; ++i) {
        const int c = threadIdx.x + i * THREADS;
        const int cl = c / (BN / 8), px = (c % (BN / 8)) * 8, co = m0 + cl;
        const int y = h0 + (px >> lg), x = w0 + (px & (TW - 1));
        if (co >= p.Cout || y >= p.Ho || x >= p.Wo) continue;
        bf16* dst = p.out + (((int64_t)n * p.Cout + co) * p.Ho + y) * p.Wo + x;
        const bf16* src = Cs + cl * LDN + px;
        if (p.vec_out && x + 8 <= p.Wo) {
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        } else {
            #pragma unroll
            for (int j = 0; j < 8; ++j)
                if (x + j < p.Wo) dst[j] = src[j];
        }
    }
}

// Stride-1 convolution of x (NB, C, H, W) by w (Cout, C, KH, KW) with zero padding, plus bias, into out
// (NB, Cout, Ho, Wo). wk: scratch of Cout * KH * KW * CB * 32 elements, CB = ceil(C / 32), 16-byte aligned.
// Returns nullptr or the CUDA error.
const char* conv2d_bf16(const void* x, const void* w, const void* bias, void* out, void* wk, int NB, int C, int H,
                        int W, int Cout, int KH, int KW, int pad_h, int pad_w) {
    const int CB = (C + BK - 1) / BK, Ho = H + 2 * pad_h - KH + 1, Wo = W + 2 * pad_w - KW + 1;
    if (NB == 0 || Cout == 0 || Ho <= 0 || Wo <= 0) return nullptr;
    if (C == 0) return "no input channels";
    // the kernel's offsets within one image and within the packed weight are ints
    if ((int64_t)(CB * BK + 16) * H * W >= INT32_MAX || (int64_t)(Cout + BM) * KH * KW * CB * BK >= INT32_MAX)
        return "image or weight too large for 32-bit offsets";
    if (!aligned16(wk)) return "the weight scratch buffer must be 16-byte aligned (cp.async)";
    const int64_t wtotal = (int64_t)Cout * KH * KW * CB * BK;
    weight_pack_kernel<<<(unsigned)std::min<int64_t>((wtotal + 255) / 256, 4096), 256>>>(
        static_cast<const bf16*>(w), static_cast<bf16*>(wk), Cout, C, KH, KW, CB);
    const char* err = launch_status();
    if (err) return err;
    int lg = 3;  // tile width: the smallest power of two >= Wo, from 8 to 128
    while ((1 << lg) < Wo && (1 << lg) < BN) ++lg;
    const int TW = 1 << lg, TH = BN / TW;
    ConvArgs p{static_cast<const bf16*>(x), static_cast<const bf16*>(wk), static_cast<const bf16*>(bias),
               static_cast<bf16*>(out), C, H, W, Cout, KH, KW, pad_h, pad_w, Ho, Wo, CB, KH * KW * CB * BK,
               (Cout + BM - 1) / BM, lg, Wo % 8 == 0 && aligned16(out)};
    const int smem = STAGES * (BM * LDK + BK * LDN) * (int)sizeof(bf16);  // >= the BM x LDN output tile
    const dim3 grid((Wo + TW - 1) / TW, (Ho + TH - 1) / TH, NB * p.co_tiles);
    if (W % 8 == 0 && aligned16(x)) {
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

const char* conv2d_bf16(const void* x, const void* w, const void* bias, void* out, void* wk, int NB, int C, int H,
                        int W, int Cout, int KH, int KW, int pad_h, int pad_w);

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
    const int64_t Ho = H + 2 * pad_h - KH + 1, Wo = W + 2 * pad_w - KW + 1, CB = (C + 31) / 32;
    TORCH_CHECK(Ho > 0 && Wo > 0 && bc.numel() == Cout, "bad sizes");
    auto out = torch::empty({NB, Cout, Ho, Wo}, xc.options());
    auto wk = torch::empty({Cout * KH * KW * CB * 32}, xc.options());  // the weight, packed for the GEMM's k
    const char* err = conv2d_bf16(xc.data_ptr(), wc.data_ptr(), bc.data_ptr(), out.data_ptr(), wk.data_ptr(),
                                  (int)NB, (int)C, (int)H, (int)W, (int)Cout, (int)KH, (int)KW, (int)pad_h,
                                  (int)pad_w);
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

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <algorithm>
#include <vector>

// Direct stride-1 convolution. Each task computes 4 output-channel planes of one image so that
// every loaded input row feeds 4 accumulators; the inner loop over w vectorises. Storage is float32,
// bfloat16 or float16 (x, weight, bias, out alike); accumulation is in float, rounded once on store.
template <typename T>
static void conv2d_planes(const T* in, const T* w, const T* b, T* o, int64_t N, int64_t Cin, int64_t H, int64_t W,
                          int64_t Cout, int64_t KH, int64_t KW, int64_t pad_h, int64_t pad_w, int64_t Ho, int64_t Wo) {
    constexpr int64_t CB = 4;
    const int64_t HWo = Ho * Wo, ncb = (Cout + CB - 1) / CB;
    #pragma omp parallel
    {
        std::vector<float> acc(CB * HWo);
        #pragma omp for collapse(2) schedule(static)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t cb = 0; cb < ncb; ++cb) {
                const int64_t co0 = cb * CB, cn = std::min(CB, Cout - co0);
                for (int64_t c = 0; c < CB; ++c)
                    std::fill(acc.begin() + c * HWo, acc.begin() + (c + 1) * HWo,
                              c < cn ? static_cast<float>(b[co0 + c]) : 0.f);
                for (int64_t ci = 0; ci < Cin; ++ci) {
                    const T* xp = in + (n * Cin + ci) * H * W;
                    for (int64_t kh = 0; kh < KH; ++kh)
                        for (int64_t kw = 0; kw < KW; ++kw) {
                            float wv[CB];  // channels past Cout get weight 0 and are never stored
                            for (int64_t c = 0; c < CB; ++c)
                                wv[c] = c < cn ? static_cast<float>(w[(((co0 + c) * Cin + ci) * KH + kh) * KW + kw])
                                               : 0.f;
                            const int64_t dh = kh - pad_h, dw = kw - pad_w;  // input = output + d
                            const int64_t h0 = std::max<int64_t>(0, -dh), h1 = std::min(Ho, H - dh);
                            const int64_t w0 = std::max<int64_t>(0, -dw), w1 = std::min(Wo, W - dw);
                            for (int64_t h = h0; h < h1; ++h) {
                                const T* src = xp + (h + dh) * W + dw;
                                float* a0 = acc.data() + h * Wo;
                                float* a1 = a0 + HWo; float* a2 = a1 + HWo; float* a3 = a2 + HWo;
                                for (int64_t j = w0; j < w1; ++j) {
                                    const float s = static_cast<float>(src[j]);
                                    a0[j] += wv[0] * s; a1[j] += wv[1] * s; a2[j] += wv[2] * s; a3[j] += wv[3] * s;
                                }
                            }
                        }
                }
                for (int64_t c = 0; c < cn; ++c) {
                    const float* a = acc.data() + c * HWo;
                    T* op = o + (n * Cout + co0 + c) * HWo;
                    for (int64_t i = 0; i < HWo; ++i) op[i] = static_cast<T>(a[i]);
                }
            }
    }
}

torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                             int64_t pad_h, int64_t pad_w) {
    const auto st = x.scalar_type();
    TORCH_CHECK(st == torch::kFloat32 || st == torch::kBFloat16 || st == torch::kHalf,
                "float32, bfloat16 or float16 expected, got ", st);
    TORCH_CHECK(weight.scalar_type() == st && bias.scalar_type() == st, "weight and bias must have x's dtype");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && x.size(1) == weight.size(1), "NCHW input, OIHW weight");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    const int64_t N = xc.size(0), Cin = xc.size(1), H = xc.size(2), W = xc.size(3);
    const int64_t Cout = wc.size(0), KH = wc.size(2), KW = wc.size(3);
    const int64_t Ho = H + 2 * pad_h - KH + 1, Wo = W + 2 * pad_w - KW + 1;
    TORCH_CHECK(Ho > 0 && Wo > 0 && bc.numel() == Cout, "bad sizes");
    auto out = torch::empty({N, Cout, Ho, Wo}, xc.options());
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, st, "conv2d_forward", [&] {
        conv2d_planes<scalar_t>(xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(),
                                out.data_ptr<scalar_t>(), N, Cin, H, W, Cout, KH, KW, pad_h, pad_w, Ho, Wo);
    });
    return out;
}
"""

_ext = load_inline(name="kf_oracle_cpu_conv2d", cpp_sources=[cpp_source], functions=["conv2d_forward"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=True)

    def forward(self, x):
        c = self.conv
        return _ext.conv2d_forward(x, c.weight, c.bias, c.padding[0], c.padding[1])

"""The digest and the rule-based analyst on synthetic metric sets."""

import pytest

from kforge.problems import problem_from_source
from kforge.profile import KernelStat, Profile
from kforge.profile.digest import build
from kforge.profile.render import render_png
from kforge.profile.rules import classify

H100 = {"bandwidth_bytes_per_s": 3.0e12, "fp32_flops": 50e12}
SRC = ("import torch\nN = 1\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
       "def get_inputs():\n    return [torch.randn(N)]\ndef get_init_inputs():\n    return []\n")


def problem(flops, nbytes):
    p = problem_from_source(SRC, where="<t>", name="t")
    return type(p)(**{**p.__dict__, "flops": flops, "bytes": nbytes})


def gpu_profile(*kernels):
    return Profile("ncu", "NVIDIA H100", list(kernels), sum(k.time_ms for k in kernels))


def test_memory_bound_far_from_peak_asks_for_coalescing():
    # 1 GB moved in 1 ms = 1 TB/s of 3 TB/s; DRAM 35% busy, SMs 20%.
    d = build(problem(2.5e8, 1e9), gpu_profile(KernelStat("k", 1.0, 1, {"dram_pct": 35, "sm_pct": 20,
                                                                          "occupancy_pct": 70})),
              time_ms=1.0, floor_ms=1e9 / 3e12 * 1e3, ceilings=H100)
    assert d.bound == "memory" and d.bandwidth_fraction == pytest.approx(1 / 3)
    assert d.speed_of_light == pytest.approx(1 / 3)
    f = classify(d)
    assert f.rule == "memory_inefficient" and "float4" in f.action and "33%" in f.evidence


def test_memory_bound_at_peak_asks_for_fewer_bytes():
    d = build(problem(2.5e8, 2.7e9), gpu_profile(KernelStat("k", 1.0, 1, {"dram_pct": 90, "sm_pct": 30})),
              time_ms=1.0, ceilings=H100)
    f = classify(d)
    assert d.bound == "memory" and f.rule == "memory_roofline" and "fewer bytes" in f.action


def test_compute_bound_matmul_asks_for_tiling():
    # 2*4096^3 FLOPs in 10 ms: 13.7 TFLOP/s of 50, intensity ~680 FLOP/B.
    flops, nbytes = 2 * 4096 ** 3, 3 * 4 * 4096 ** 2
    d = build(problem(flops, nbytes), gpu_profile(KernelStat("sgemm", 10.0, 1, {"dram_pct": 10, "sm_pct": 55,
                                                                                  "occupancy_pct": 50})),
              time_ms=10.0, ceilings=H100)
    f = classify(d)
    assert d.bound == "compute" and f.rule == "data_reuse" and "shared memory" in f.action


def test_bf16_matrix_work_off_the_tensor_cores_asks_for_them():
    """The same GEMM in bf16 is held to the tensor cores' rate; a kernel whose tensor pipe idles is told to use it,
    one that keeps it busy gets the usual advice, and memory-bound work is never sent there."""
    flops, nbytes = 2 * 4096 ** 3, 3 * 2 * 4096 ** 2
    ceilings = {**H100, "bf16_flops": 800e12}
    idle = build(problem(flops, nbytes), gpu_profile(KernelStat("gemm_fma", 10.0, 1, {"dram_pct": 10, "sm_pct": 55,
                                                                                       "tensor_pct": 0.0})),
                 time_ms=10.0, ceilings=ceilings, precision="bf16")
    assert idle.peak_tflops == 800 and classify(idle).rule == "tensor_cores"
    assert "tl.dot" in classify(idle).action and "wmma" in classify(idle).action.lower()
    busy = build(problem(flops, nbytes), gpu_profile(KernelStat("gemm_hmma", 1.0, 1, {"dram_pct": 10, "sm_pct": 55,
                                                                                       "tensor_pct": 60.0})),
                 time_ms=1.0, ceilings=ceilings, precision="bf16")
    assert classify(busy).rule != "tensor_cores"
    relu = build(problem(1e8, 8e8), gpu_profile(KernelStat("relu", 1.0, 1, {"dram_pct": 80, "sm_pct": 20})),
                 time_ms=1.0, ceilings=ceilings, precision="bf16")
    assert classify(relu).rule != "tensor_cores"
    fp32 = build(problem(flops, nbytes), gpu_profile(KernelStat("g", 10.0, 1, {})), time_ms=10.0, ceilings=ceilings)
    assert classify(fp32).rule != "tensor_cores"  # fp32: the CUDA cores are the right place


def test_low_occupancy_names_the_limits():
    d = build(problem(1e8, 1e9), gpu_profile(KernelStat("k", 2.0, 1, {"dram_pct": 30, "sm_pct": 25,
                                                                        "occupancy_pct": 12, "registers": 168,
                                                                        "smem_static_bytes": 98304,
                                                                        "block_size": 1024, "grid_size": 16})),
              time_ms=2.0, ceilings=H100)
    f = classify(d)
    assert d.bound == "latency" and f.rule == "low_occupancy"
    assert "168 registers" in f.evidence and "96 KB" in f.evidence and "12%" in f.evidence


def test_register_spills_come_first():
    d = build(problem(1e8, 1e9), gpu_profile(KernelStat("k", 1.0, 1, {"dram_pct": 80, "sm_pct": 40,
                                                                        "local_load_bytes": 4e6,
                                                                        "local_store_bytes": 2e6,
                                                                        "registers": 255})),
              time_ms=1.0, ceilings=H100)
    f = classify(d)
    assert f.rule == "register_spills" and "6.00 MB" in f.evidence and "255 registers" in f.evidence


def test_tiny_kernel_is_latency_bound():
    d = build(problem(4096, 32768), gpu_profile(KernelStat("k", 0.004, 1, {"dram_pct": 2, "sm_pct": 3})),
              time_ms=0.012, ceilings=H100)
    f = classify(d)
    assert d.bound == "latency" and f.rule == "tiny_latency_bound" and "single launch" in f.action


def test_several_launches_ask_for_fusion():
    d = build(problem(1e8, 1e9), gpu_profile(KernelStat("mean", 0.5, 1, {"dram_pct": 85, "sm_pct": 20}),
                                             KernelStat("norm", 0.4, 1, {"dram_pct": 80, "sm_pct": 20})),
              time_ms=1.0, ceilings=H100)
    f = classify(d)
    assert d.launches == 2 and f.rule == "unfused_launches" and "fuse the 2 kernels" in f.action


def test_stalls_are_ranked_and_shown():
    d = build(problem(None, None), gpu_profile(KernelStat("k", 1.0, 1, {"dram_pct": 50, "sm_pct": 45,
                                                                          "stall_long_scoreboard": 12.0,
                                                                          "stall_barrier": 3.0,
                                                                          "stall_wait": 1.0})))
    assert d.kernels[0].stalls[0] == ("long_scoreboard", 12.0)
    assert classify(d).rule == "memory_latency_stalls"
    assert "top stalls: long_scoreboard 12.00" in d.text()


def test_cpu_profile_points_at_own_code():
    prof = Profile("torch", "cpu (x86_64, 2 cores)", [KernelStat("candidate code (outside torch operators)", 9.0),
                                                       KernelStat("aten::empty_like", 1.0)], 10.0)
    f = classify(build(problem(1e6, 1e7), prof, time_ms=10.0))
    assert f.rule == "cpu_own_code" and "OpenMP" in f.action and "90%" in f.evidence


def test_digest_without_profile_uses_the_roofline(tmp_path):
    d = build(problem(1e6, 3e9), None, time_ms=2.0, floor_ms=1.0, ceilings=H100, device="NVIDIA H100")
    assert d.kernels == [] and d.bound == "memory" and d.speed_of_light == 0.5
    png = render_png(d, tmp_path / "d.png")
    assert png.stat().st_size > 5000 and png.read_bytes()[:4] == b"\x89PNG"


def test_digests_drawn_from_several_threads_at_once(tmp_path):
    # Problem loops are threads; unguarded, matplotlib's shared text state broke a sweep this way.
    from concurrent.futures import ThreadPoolExecutor
    prof = gpu_profile(KernelStat("void k<$1>(float*)", 0.6), KernelStat("kernel$2", 0.4))
    d = build(problem(1e6, 3e9), prof, time_ms=1.0, ceilings=H100, device="NVIDIA H100")
    with ThreadPoolExecutor(4) as ex:
        pngs = list(ex.map(lambda i: render_png(d, tmp_path / f"d{i}.png"), range(8)))
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)

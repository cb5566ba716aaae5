"""The faster-than-physics check: where the floor comes from and when a median is accused."""

from kforge.precision import PRECISIONS
from kforge.problems import load_builtin
from kforge.verify.roofline import SPLIT_PRODUCTS, TOO_FAST, roofline

H100 = {"bandwidth_bytes_per_s": 3.0e12, "fp32_flops": 50e12, "tf32_flops": 400e12, "bf16_flops": 750e12}
MATMUL = load_builtin(names=["4_Matmul"], size="gpu")[0]


def _check(median_ms, ceilings=H100, precision="fp32"):
    return roofline(MATMUL, None, median_ms, "cuda", lambda fresh: ceilings, PRECISIONS[precision])


def test_speed_of_light_is_the_fp32_fma_floor_for_an_fp32_problem():
    r = _check(10.0)
    assert r.too_fast is None
    assert abs(r.floor_ms - MATMUL.flops / H100["fp32_flops"] * 1e3) / r.floor_ms < 0.05  # compute-bound


def test_split_bf16_tensor_core_speeds_are_not_accused():
    # 3xBF16 on an H100 ran the 137 GFLOP matmul in ~0.75 ms: 3.6x under the fp32 FMA floor, fp32-accurate
    fp32_floor = MATMUL.flops / H100["fp32_flops"] * 1e3
    r = _check(fp32_floor / 3.6)
    assert r.too_fast is None and r.floor_ms > fp32_floor * 0.99


def test_faster_than_a_third_of_the_bf16_rate_is_accused():
    split_floor = MATMUL.flops * SPLIT_PRODUCTS / H100["bf16_flops"] * 1e3
    r = _check(split_floor * TOO_FAST * 0.5)
    assert r.too_fast and "faster than the problem's roofline floor" in r.too_fast


def test_without_a_bf16_rate_the_fp32_peak_is_the_limit():
    fp32_only = {k: v for k, v in H100.items() if k != "bf16_flops"}
    fp32_floor = MATMUL.flops / H100["fp32_flops"] * 1e3
    assert _check(fp32_floor / 3.6, fp32_only).too_fast


def test_a_bf16_problem_is_held_to_the_bf16_peak():
    bf16_floor = MATMUL.flops / H100["bf16_flops"] * 1e3
    assert _check(bf16_floor * 1.2, precision="bf16").too_fast is None
    assert _check(bf16_floor * TOO_FAST * 0.5, precision="bf16").too_fast

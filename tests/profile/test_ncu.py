"""Parsing ncu's raw CSV (`--csv --page raw --print-units base`) into a Profile.

Two fixtures: one written by hand in ncu's format (header row, units row, one row per launch, the
==PROF== lines ncu mixes in), and a real capture: the profile.csv `benchmarks/gpu_validation.sh` logged
to MLflow for a hand-written SGEMM on an H100 (3 profiled calls, kforge's full metric set).
"""

from pathlib import Path

import pytest

from kforge.problems import resolve_problem
from kforge.profile.digest import build
from kforge.profile.ncu import DURATION, NcuReport, parse_raw_csv, per_call_duration_ms, supported, to_profile
from kforge.profile.rules import classify

FIXTURE = Path(__file__).parent / "fixtures" / "ncu_raw_synthetic.csv"
CAPTURE = Path(__file__).parent / "fixtures" / "ncu_raw_h100_capture.csv"


def test_parse_rows_units_and_thousands_separators():
    kernels = parse_raw_csv(FIXTURE.read_text())
    assert len(kernels) == 4 and kernels[0].name.startswith("row_max_kernel")
    assert kernels[0].metrics[DURATION] == 412384.0 and kernels[1].metrics["launch__registers_per_thread"] == 40
    assert kernels[0].launch["Grid Size"] == "(4096, 1, 1)" and "Kernel Name" in kernels[0].launch


def test_profile_groups_launches_per_call():
    report = NcuReport(parse_raw_csv(FIXTURE.read_text()), iterations=2)
    assert per_call_duration_ms(report) == pytest.approx([1.067488, 1.066912])
    prof = to_profile(report, "NVIDIA H100")
    by_name = {k.name.split("(")[0]: k for k in prof.kernels}
    assert by_name["normalise_kernel"].calls == 1 and by_name["normalise_kernel"].time_ms == pytest.approx(0.655552)
    assert by_name["row_max_kernel"].metrics["dram_pct"] == pytest.approx((78.51 * 412384 + 78.90 * 410912) /
                                                                         (412384 + 410912))
    assert by_name["normalise_kernel"].metrics["stall_long_scoreboard"] == pytest.approx(6.39, abs=0.01)
    d = build(resolve_problem("level1/2_Softmax", size="gpu"), prof, time_ms=1.08,
              ceilings={"bandwidth_bytes_per_s": 3.0e12, "fp32_flops": 5e13})
    assert d.launches == 2 and d.bound == "memory" and classify(d).rule == "unfused_launches"


def test_unknown_metrics_are_dropped_not_fatal():
    keep, drop = supported(["dram__throughput.avg.pct_of_peak_sustained_elapsed", "launch__grid_size",
                            "made_up__metric.sum"], {"dram__throughput"})
    assert keep == ["dram__throughput.avg.pct_of_peak_sustained_elapsed", "launch__grid_size"]
    assert drop == ["made_up__metric.sum"]


def test_real_h100_capture_parses_into_the_digest_metrics():
    kernels = parse_raw_csv(CAPTURE.read_text())
    assert [k.name for k in kernels] == ["void sgemm_kernel<0, 1>(GemmParams)"] * 3
    report = NcuReport(kernels, iterations=3)
    assert per_call_duration_ms(report) == pytest.approx([3.511296, 3.493408, 3.50384])
    (k,) = to_profile(report, "NVIDIA H100 80GB HBM3").kernels
    assert k.calls == 1 and k.time_ms == pytest.approx(3.502848, rel=1e-6)
    m = k.metrics
    # What the digest and the rules read, under kforge's names, with the values ncu reported.
    assert m["sm_pct"] == pytest.approx(69.7, abs=0.1) and m["fma_pct"] == pytest.approx(61.95, abs=0.1)
    assert m["dram_pct"] == pytest.approx(3.97, abs=0.01) and m["tensor_pct"] < 1
    assert m["registers"] == 128 and m["occupancy_pct"] == pytest.approx(24.75, abs=0.1)
    assert m["smem_static_bytes"] == 33792 and m["waves"] == pytest.approx(7.76)
    assert m["stall_not_selected"] > m["stall_long_scoreboard"] > 0

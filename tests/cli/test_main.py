"""The `kforge` command: listing, verifying, JSON output and exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kforge.cli import main
from tests.helpers import CANDIDATES


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kforge.cli", *args], capture_output=True, text=True, timeout=600)


def test_problems_lists_the_suite(capsys):
    assert main(["problems"]) == 0
    out = capsys.readouterr().out
    assert "level1/1_ReLU" in out and "level3/2_AttentionBlock" in out and "12 problem(s)" in out
    # The sizes a cpu verify runs (the cpu preset), said so; not the file's own constants (BATCH=4096).
    relu = next(line for line in out.splitlines() if line.startswith("level1/1_ReLU"))
    assert "BATCH=64," in relu and "at the cpu size preset, what `kforge verify` runs with --backend cpu" in out
    assert main(["problems", "--size", "default"]) == 0
    assert "BATCH=4096," in capsys.readouterr().out


def test_a_reader_that_stops_early_is_no_error():
    # `kforge problems | head -0`: the reader has closed the pipe before kforge writes
    proc = subprocess.Popen([sys.executable, "-m", "kforge.cli", "problems"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_problems_says_a_precision_without_audit_changes_nothing_it_lists(capsys):
    assert main(["problems", "--level", "1", "--precision", "bf16"]) == 0
    assert "--precision bf16 changes --audit and --solution only" in capsys.readouterr().err


def test_problems_json_and_kernelbench_dir(tmp_path, capsys):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "19_ReLU.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
        "N = 16\ndef get_inputs():\n    return [torch.randn(N)]\ndef get_init_inputs():\n    return []\n")
    assert main(["problems", "--dir", str(tmp_path), "--level", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["19_ReLU"] and rows[0]["level"] == 1


def test_an_audit_counts_the_problems_that_fail_apart_and_exits_1(tmp_path, capsys):
    """The summary said "2 problem(s) audited" beside an error row, and the command exited 0."""
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "19_ReLU.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
        "N = 16\ndef get_inputs():\n    return [torch.randn(N)]\ndef get_init_inputs():\n    return []\n")
    (tmp_path / "level1" / "20_Det.py").write_text(  # no bf16 kernel for det on a CPU
        (tmp_path / "level1" / "19_ReLU.py").read_text().replace("torch.relu(x)", "torch.linalg.det(x)").replace(
            "torch.randn(N)", "torch.randn(N, 4, 4)"))
    assert main(["problems", "--dir", str(tmp_path), "--level", "1", "--audit", "--precision", "bf16"]) == 1
    out = capsys.readouterr().out
    assert "1 problem(s) audited on cpu at bf16 (1 failed on their own: error rows above)" in out, out


def test_verify_json_fields_and_exit_zero_on_failure(tmp_path):
    cand = CANDIDATES / "cpu" / "relu_torch_only.py"
    res = run_cli("verify", "level1/1_ReLU", str(cand), "--json", "--set", "BATCH=4", "--set", "DIM=512",
                  "--trials", "1", "--no-compile-ref")
    assert res.returncode == 0, res.stderr
    verdict = json.loads(res.stdout)
    assert verdict["state"] == "kernel_unused" and verdict["rule"] == "kernel_not_run" and verdict["correct"] is False
    assert verdict["states"] == {"kforge": "kernel_unused", "kernelbench": "correct", "strict": "kernel_unused"}
    assert verdict["kernel_share"] == 0 and "no_kernel" in {f["rule"] for f in verdict["evidence"]["findings"]}
    for key in ("speedup_eager", "speedup_compile", "runtime_ms", "ref_runtime_ms", "compile_ref_runtime_ms",
                "message"):
        assert key in verdict
    res = run_cli("verify", "level1/1_ReLU", str(cand), "--json", "--set", "BATCH=4", "--set", "DIM=512",
                  "--trials", "1", "--no-compile-ref", "--no-kernel-check")
    verdict = json.loads(res.stdout)
    assert verdict["state"] == "correct" and verdict["speedup_eager"] > 0 and verdict["runtime_ms"] > 0


def test_verify_without_a_verdict_because_the_gpu_was_busy_exits_1_and_says_why(monkeypatch, capsys):
    from kforge.sandbox.memory import DeviceBusy
    from kforge.verify import Verifier

    def busy(self, *args, **kwargs):
        assert self.config.device_busy_wait_s == 7  # --busy-wait
        raise DeviceBusy("the device ran out of memory while other processes held 122.0 GiB of its 139.8 GiB; "
                         "tried 1 time(s) over 0 s (verify.device_busy_wait_s, --busy-wait on the command line: 7 s)")
    monkeypatch.setattr(Verifier, "verify", busy)
    cand = str(CANDIDATES / "cpu" / "relu_torch_only.py")
    assert main(["verify", "level1/1_ReLU", cand, "--json", "--no-compile-ref", "--busy-wait", "7"]) == 1
    out, err = capsys.readouterr()
    row = json.loads(out)  # a JSON reader still gets one object: state `error`, as `kforge eval` writes one
    assert row["state"] == "error" and row["correct"] is False and "122.0 GiB" in row["error"]
    assert "kforge: the device ran out of memory" in err and "Traceback" not in err


def test_verify_reply_in_markdown(tmp_path):
    reply = tmp_path / "reply.md"
    reply.write_text("Here is my answer, in prose only.")
    res = run_cli("verify", "relu", str(reply), "--json", "--set", "BATCH=4", "--set", "DIM=512")
    assert res.returncode == 0 and json.loads(res.stdout)["state"] == "generation_failure"


def test_usage_errors_exit_two(tmp_path, capsys):
    cand = str(CANDIDATES / "cpu" / "relu_ok.py")
    assert main(["verify", str(tmp_path / "missing.py"), cand]) == 2
    assert "no such problem file" in capsys.readouterr().err
    assert main(["verify", "relu", str(tmp_path / "missing.py")]) == 2
    assert "no such candidate file" in capsys.readouterr().err
    assert main(["verify", "relu", str(tmp_path)]) == 2  # a directory (an empty one too) is said to be one
    assert f"{tmp_path} is a directory: give one candidate file" in capsys.readouterr().err
    assert main(["verify", "relu", cand, "--backend", "metal9"]) == 2
    assert "unknown backend 'metal9' (choose from cpu, cuda, triton, opencl, cute, tilelang)" in capsys.readouterr().err
    bad = tmp_path / "bad.py"
    bad.write_text("class Model:\n    pass\n")
    assert main(["verify", str(bad), cand]) == 2
    assert "no `get_inputs()` function defined" in capsys.readouterr().err
    assert main(["build", "--oracle", "--backend", "opencl", "--precision", "bf16"]) == 2  # fp32-only kernels
    assert "no built-in opencl solution takes bf16" in capsys.readouterr().err
    # numbers that judged nothing or blamed the candidate: 0 trials "correct", a -1 s limit a `timeout`
    for flags, said in ((["--trials", "0"], "at least one correctness trial"), (["--timeout", "-1"], "--timeout=-1.0 must "
                        "be positive"), (["--atol", "-5"], "--atol=-5.0 must be a number, not negative"),
                       (["--rtol", "nan"], "--rtol=nan must be a number, not negative")):
        assert main(["verify", "relu", cand, *flags]) == 2
        assert said in capsys.readouterr().err, flags


def test_first_build_says_it_compiles_torch_headers(tmp_path):
    """Keyed by torch, compiler and flags: a header precompiled for another torch or flags is no reason to
    stay silent; one for these is."""
    import json

    import torch

    from kforge.backends import get_backend
    from kforge.backends.build import compiler_line
    from kforge.backends.header import FAILED, PCH_STAMP, pch_stamp
    from kforge.job.firstrun import _gcc, expected_cflags, pch_pending
    if not sys.platform.startswith("linux") or not _gcc():
        pytest.skip("kforge precompiles torch's header with GCC on Linux only")
    cpu = get_backend("cpu")
    assert pch_pending(cpu, tmp_path)  # an empty build cache: the first build compiles the header
    assert expected_cflags(cpu) == ["-O3", "-fopenmp"]  # the prompt's example: what most candidates pass
    plain = "import torch\nfrom torch.utils.cpp_extension import load_inline\nmod = load_inline(name='m', cpp_sources=s)\n"
    assert expected_cflags(cpu, plain) == []

    def cached(key: str, **stamp) -> None:
        gch = tmp_path / "pch" / key / "torch" / "extension.h.gch"
        gch.parent.mkdir(parents=True)
        gch.write_bytes(b"")
        (gch.parent.parent / PCH_STAMP).write_text(json.dumps(stamp))

    cached("old", **pch_stamp("1.13.0", compiler_line(), ["-O3", "-fopenmp"]))  # another torch
    cached("plain", **pch_stamp(torch.__version__, compiler_line(), []))  # this torch, other flags
    (tmp_path / "pch" / "bare" / "torch").mkdir(parents=True)
    (tmp_path / "pch" / "bare" / "torch" / "extension.h.gch").write_bytes(b"")  # no stamp: made for who knows
    assert pch_pending(cpu, tmp_path)
    assert not pch_pending(cpu, tmp_path, plain)  # a candidate without flags finds its header
    # The full header (all a build needs where the light one does not compile) does not spare the first build.
    cached("full", **pch_stamp(torch.__version__, compiler_line(), ["-O3", "-fopenmp"], light=False))
    assert pch_pending(cpu, tmp_path)
    assert not pch_pending(get_backend("cpu", light_header=False), tmp_path)
    cached("this", **pch_stamp(torch.__version__, compiler_line(), ["-O3", "-fopenmp"]))
    assert not pch_pending(cpu, tmp_path)
    # a header the compiler refused for a candidate's flags is not made again: no minute to wait for
    fast = plain.replace("cpp_sources=s)", "cpp_sources=s, extra_cflags=['-ffast-math'])")
    assert pch_pending(cpu, tmp_path, fast)
    refused = tmp_path / "pch" / "refused"
    refused.mkdir()
    (refused / FAILED).write_text("error: ...")
    (refused / PCH_STAMP).write_text(json.dumps(pch_stamp(torch.__version__, compiler_line(), ["-ffast-math"])))
    assert not pch_pending(cpu, tmp_path, fast)
    assert not pch_pending(get_backend("triton", device="cpu"), tmp_path / "other")  # Triton builds no C++
    torch_only = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
    assert not pch_pending(cpu, tmp_path / "other", torch_only)  # a candidate with no C++ builds nothing
    assert pch_pending(cpu, tmp_path / "other", plain)


def test_the_readme_quick_start_paths_come_from_the_install(capsys):
    """`kforge problems --solution` and `--where` name files of the installed package, from any directory."""
    from kforge.problems import BUILTIN_DIR
    assert main(["problems", "--solution", "level1/1_ReLU"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.is_file() and path == BUILTIN_DIR / "solutions" / "cpu" / "level1" / "1_ReLU.py"
    assert main(["problems", "--solution", "Softmax", "--backend", "cuda"]) == 0
    assert Path(capsys.readouterr().out.strip()).parts[-3:] == ("cuda", "level1", "2_Softmax.py")
    assert main(["problems", "--where"]) == 0 and Path(capsys.readouterr().out.strip()) == BUILTIN_DIR
    assert main(["problems", "--solution", "level1/4_Matmul", "--backend", "triton", "--precision", "bf16"]) == 0
    assert Path(capsys.readouterr().out.strip()).parts[-4:] == ("triton", "bf16", "level1", "4_Matmul.py")
    assert main(["problems", "--solution", "level1/99_Nope"]) == 2
    assert "no built-in problem named level1/99_Nope" in capsys.readouterr().err


def test_verify_backward_judges_a_training_step(capsys):
    """`kforge verify --backward`: the oracle's training-step kernel is correct; its forward-only one has no
    gradient; `kforge problems --solution --backward` names the first."""
    assert main(["problems", "--solution", "level1/1_ReLU", "--backward"]) == 0
    path = capsys.readouterr().out.strip()
    assert Path(path).parts[-4:] == ("cpu", "backward", "level1", "1_ReLU.py")
    assert main(["problems", "--solution", "level1/6_Conv2d", "--backward"]) == 2
    assert "no built-in cpu training-step (backward) solution" in capsys.readouterr().err
    small = ["--set", "BATCH=4", "--set", "DIM=512", "--trials", "2", "--no-compile-ref", "--json", "--backward"]
    verdict = json.loads(run_cli("verify", "level1/1_ReLU", path, *small).stdout)
    assert verdict["state"] == "correct" and verdict["attribution"]["backward_share"] > 0, verdict["message"]
    forward = json.loads(run_cli("verify", "level1/1_ReLU", str(CANDIDATES / "cpu" / "relu_ok.py"), *small).stdout)
    assert forward["state"] == "shape_mismatch" and forward["evidence"]["mismatch"]["gradient"] == "input 0"

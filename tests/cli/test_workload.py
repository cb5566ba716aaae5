"""``kforge workload profile|extract|assemble`` (kforge/cli/workload.py) on a small model file on cpu: the
regions extracted and listed, the model put back together from them, and bad input answered with exit 2."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

from kforge.cli import build_parser, main

MODEL = '''import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.block = Block(n)
        self.norm = nn.LayerNorm(n)

    def forward(self, x):
        return self.norm(self.block(x)) * 2


def get_inputs():
    return [torch.randn(16, 256)]


def get_init_inputs():
    return [256]
'''


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """The model file, its extraction by ``kforge workload extract`` (one profile: a worker starts), and what
    the command printed."""
    tmp = tmp_path_factory.mktemp("workload-cli")
    model = tmp / "small_model.py"
    model.write_text(MODEL)
    out = tmp / "regions"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["workload", "extract", str(model), str(out), "--cover", "1.0", "--iterations", "1"])
    assert code == 0
    return model, out, printed.getvalue()


def test_extract_lists_the_regions_and_writes_the_workload(extracted):
    model, out, printed = extracted
    workload = json.loads((out / "workload.json").read_text())
    paths = sorted(r["path"] for r in workload["regions"])
    assert paths == ["block", "norm"]
    assert "2 regions cover" in printed and "small_model.py's operator time on cpu" in printed
    assert all(r["file"] in printed for r in workload["regions"]) and "wrote " in printed
    assert (out / "profile.txt").is_file() and (out / "profile.png").is_file()


def test_assemble_puts_the_regions_back_into_the_same_model(extracted, capsys, tmp_path):
    _, out, _ = extracted
    program = tmp_path / "assembled.py"
    assert main(["workload", "assemble", str(out), "--identity", "--out", str(program)]) == 0
    assert f"wrote {program} (2/2 regions replaced)" in capsys.readouterr().out
    ns: dict = {}
    exec(compile(program.read_text(), str(program), "exec"), ns)  # noqa: S102 - our own assembled program
    model_ns: dict = {}
    exec(compile(MODEL, "small_model.py", "exec"), model_ns)  # noqa: S102
    torch.manual_seed(0)
    reference = model_ns["Model"](256)
    torch.manual_seed(0)
    assembled = ns["ModelNew"](256)
    x = torch.randn(16, 256)
    assert type(assembled.block).__name__ != "Block"  # the region's own kernel (its Model renamed) is in place
    torch.testing.assert_close(assembled(x), reference(x))


def test_bad_input_is_a_clear_error_with_exit_2(extracted, capsys, tmp_path):
    model, out, _ = extracted
    assert main(["workload", "assemble", str(out), "--kernel", f"9_nosuch={model}"]) == 2
    assert "no region '9_nosuch'" in capsys.readouterr().err
    assert main(["workload", "assemble", str(out), "--kernel", "block"]) == 2
    assert "--kernel expects REGION=FILE" in capsys.readouterr().err
    assert main(["workload", "profile", str(tmp_path / "nosuch_model.py")]) == 2
    assert "nosuch_model.py: no such problem file" in capsys.readouterr().err
    assert main(["workload", "extract", "nosuch_model", str(tmp_path / "out")]) == 2
    assert "no model file 'nosuch_model' and no built-in workload" in capsys.readouterr().err
    assert main(["workload", "profile", str(model), "--backend", "nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["workload", "profile", str(model), "--precision", "fp8"])
    assert "invalid choice: 'fp8'" in capsys.readouterr().err


def test_profile_in_bf16_says_so(extracted, capsys):
    model, _, _ = extracted
    assert main(["workload", "profile", str(model), "--precision", "bf16", "--iterations", "1", "--json"]) == 0
    prof = json.loads(capsys.readouterr().out)
    assert prof["precision"] == "bf16"
    assert {m["path"]: m["param_dtypes"] for m in prof["modules"]}["block.lin"] == ["torch.bfloat16"]


def test_every_option_is_parsed():
    args = build_parser().parse_args(["workload", "extract", "m.py", "out", "--backend", "triton", "--device", "cpu",
                                      "--size", "cpu", "--iterations", "2", "--top", "3", "--cover", "0.5",
                                      "--min-share", "0.01"])
    assert (args.workload_command, args.model, args.out_dir, args.backend, args.device, args.size, args.iterations,
            args.top, args.cover, args.min_share) == ("extract", "m.py", "out", "triton", "cpu", "cpu", 2, 3, 0.5,
                                                      0.01)
    args = build_parser().parse_args(["workload", "profile", "m.py", "--plot", "p.png", "--rows", "5", "--json"])
    assert (args.plot, args.rows, args.json, args.backend, args.iterations, args.precision) == (
        "p.png", 5, True, "cpu", 3, "fp32")
    assert build_parser().parse_args(["workload", "extract", "m.py", "o", "--precision", "bf16"]).precision == "bf16"
    assert build_parser().parse_args(["workload", "assemble", "w"]).precision is None  # the workload's own
    args = build_parser().parse_args(["workload", "assemble", "w", "--kernel", "a=k.py", "--kernel", "b=j.py",
                                      "--oracle", "--out", "o.py", "--verify", "--trials", "2", "--no-compile-ref",
                                      "--no-timing", "--no-kernel-check"])
    assert (args.kernel, args.oracle, args.identity, args.out, args.verify, args.trials, args.no_compile_ref,
            args.no_timing, args.no_kernel_check) == (["a=k.py", "b=j.py"], True, False, "o.py", True, 2, True, True,
                                                      True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["workload"])  # a subcommand is required


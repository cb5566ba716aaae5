import re
from pathlib import Path

import pytest

from kforge.problems import (
    ProblemError,
    load_builtin,
    load_directory,
    load_problem_file,
    parse_ids,
    problem_from_source,
    resolve_problem,
)

GOOD = """import torch
import torch.nn as nn

N = 64
M = N * 2

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(N, M)]

def get_init_inputs():
    return []

KFORGE = {"sizes": {"cpu": {"N": 8}, "gpu": {"N": 4096}}, "flops": "N * M", "bytes": "8 * N * M", "ops": ["mul"]}
"""


def write(tmp_path: Path, rel: str, text: str) -> Path:
    p = tmp_path / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_load_file_and_sizes(tmp_path):
    path = write(tmp_path, "level2/7_Double.py", GOOD)
    p = load_problem_file(path)
    assert (p.name, p.level, p.problem_id, p.key) == ("7_Double", 2, 7, "level2/7_Double")
    assert p.constants["N"] == 64 and p.constants["M"] == 128 and p.flops == 64 * 128
    cpu = load_problem_file(path, size="cpu")
    # The preset rewrites the source; derived constants follow.
    assert "N = 8\n" in cpu.source and cpu.constants["M"] == 16 and cpu.bytes == 8 * 8 * 16 and cpu.size == "cpu"
    custom = load_problem_file(path, size="cpu", overrides={"N": 3})
    assert custom.constants == {"N": 3, "M": 6} and custom.size == "cpu+custom"
    assert load_problem_file(path, overrides={"N": 5}).size == "custom"


def test_file_without_metadata_runs_at_its_own_size(tmp_path):
    text = GOOD.split("KFORGE")[0]
    p = load_problem_file(write(tmp_path, "3_Plain.py", text), size="gpu")
    assert p.size == "default" and p.flops is None and p.constants["N"] == 64


@pytest.mark.parametrize("text,message", [
    ("import torch\nclass Model(:\n", "syntax error at line 2"),
    ("def get_inputs(): return []\ndef get_init_inputs(): return []\n", "no `class Model` defined"),
    ("class Model: pass\ndef get_init_inputs(): return []\n", "no `get_inputs()` function defined"),
    ("class Model: pass\ndef get_inputs(): return []\n", "no `get_init_inputs()` function defined"),
])
def test_malformed_file_names_file_and_problem(tmp_path, text, message):
    path = write(tmp_path, "bad.py", text)
    with pytest.raises(ProblemError) as exc:
        load_problem_file(path)
    assert str(path) in str(exc.value) and message in str(exc.value)


def test_unknown_override_lists_constants(tmp_path):
    path = write(tmp_path, "x.py", GOOD)
    with pytest.raises(ProblemError, match=r"no top-level constant K .*constants: M, N"):
        load_problem_file(path, overrides={"K": 1})


def test_text_for_a_numeric_constant_is_the_overrides_fault_not_the_problems(tmp_path):
    path = write(tmp_path, "x.py", GOOD)
    with pytest.raises(ProblemError, match=r"M is \d+ in the file; 'abc' is not a whole number to override it to"):
        load_problem_file(path, overrides={"M": "abc"})


@pytest.mark.parametrize("value", [2.5, 1e3, True, (4, 4)])
def test_an_override_of_another_kind_is_refused_before_the_problem_runs(tmp_path, value):
    """``--set M=2.5`` (or ``=1e3``, ``=True``) reached ``torch.randn`` and was reported as a bug in the problem."""
    path = write(tmp_path, "x.py", GOOD)
    with pytest.raises(ProblemError, match=rf"M is \d+ in the file; {re.escape(repr(value))} is not a whole number"):
        load_problem_file(path, overrides={"M": value})


def test_a_shape_override_must_be_a_shape(tmp_path):
    path = write(tmp_path, "x.py", GOOD.replace("M = ", "shape = (8, 8)\nM = "))
    with pytest.raises(ProblemError, match=r"shape is \(8, 8\) in the file; 128 is not a tuple or list of sizes"):
        load_problem_file(path, overrides={"shape": 128})
    assert load_problem_file(path, overrides={"shape": [4, 4]}).constants["shape"] == [4, 4]


@pytest.mark.parametrize("declared, said", [
    ([{"M_": 8}], r"no top-level constant M_ to set in KFORGE\['variants'\]\[0\]"),
    ([{"M": 8}, {"N": "big"}], r"N is \d+ in the file; 'big' is not a whole number to set it to in KFORGE\['variants'\]\[1\]"),
    ([{}], r"each setting at least one"),
])
def test_a_declared_variant_that_sets_nothing_the_file_has_is_a_problem_error(tmp_path, declared, said):
    """A misspelt name in ``KFORGE["variants"]`` left that variant out without a word, and a kernel with the sizes
    baked in that the variant was written to catch passed."""
    path = write(tmp_path, "x.py", GOOD.replace('KFORGE = {', f'KFORGE = {{"variants": {declared!r}, '))
    with pytest.raises(ProblemError, match=said):
        load_problem_file(path)


CONV3D = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size, in_channels = 16, 3
depth = 16; height = width = 64  # the volume
out_channels = 2 ** 6


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [out_channels]
"""


def test_constants_bound_together_are_constants_and_each_can_be_set_alone():
    """KernelBench binds sizes in pairs (``height, width = 256, 256``) and chains (``height = width = 64``); each
    is a constant of its own, and setting one leaves the others as they were."""
    p = problem_from_source(CONV3D, where="c.py", name="c")
    assert p.constants == {"batch_size": 16, "in_channels": 3, "depth": 16, "height": 64, "width": 64,
                           "out_channels": 64}
    one = problem_from_source(CONV3D, where="c.py", name="c", overrides={"width": 47, "in_channels": 5})
    assert {k: one.constants[k] for k in ("batch_size", "in_channels", "height", "width")} == \
        {"batch_size": 16, "in_channels": 5, "height": 64, "width": 47}
    assert "batch_size, in_channels = 16, 5\ndepth = 16; height = 64; width = 47  # the volume\n" in one.source
    both = problem_from_source(CONV3D, where="c.py", name="c", overrides={"height": 33, "width": 31})
    assert (both.constants["height"], both.constants["width"]) == (33, 31)


def test_kernelbench_directory_selection(tmp_path, caplog):
    for rel in ("level1/1_A.py", "level1/2_B.py", "level1/10_C.py", "level2/1_D.py"):
        write(tmp_path, "KernelBench/" + rel, GOOD)
    all_ = load_directory(tmp_path)  # the checkout root works as well as its KernelBench/ folder
    assert [p.key for p in all_] == ["level1/1_A", "level1/2_B", "level1/10_C", "level2/1_D"]
    assert [p.key for p in load_directory(tmp_path / "KernelBench", levels=1, ids="2-10")] == \
        ["level1/2_B", "level1/10_C"]
    with pytest.raises(ProblemError, match="no problems match"):
        load_directory(tmp_path, levels=3)
    # one level's folder, or a user's own problem files kept flat, load as they are
    assert [p.key for p in load_directory(tmp_path / "KernelBench" / "level1", ids="1-2")] == ["level1/1_A", "level1/2_B"]
    flat = tmp_path / "mine"
    write(flat.parent, "mine/7_Mine.py", GOOD)
    assert [(p.key, p.level) for p in load_directory(flat)] == [("7_Mine", None)]
    # one broken file among good ones is named and skipped; asked for by name, or alone, it is the error
    write(tmp_path, "KernelBench/level1/3_Broken.py", "import torch\nclass Model(:\n")
    with caplog.at_level("WARNING", logger="kforge.problems.suite"):
        assert [p.key for p in load_directory(tmp_path, levels=1)] == ["level1/1_A", "level1/2_B", "level1/10_C"]
    assert "3_Broken.py: syntax error" in caplog.text and "skipped" in caplog.text
    with pytest.raises(ProblemError, match="syntax error"):
        load_directory(tmp_path, names=["3_Broken"])
    with pytest.raises(ProblemError, match="syntax error"):
        load_directory(tmp_path, ids="3")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProblemError, match="not a KernelBench layout"):
        load_directory(tmp_path / "empty")


def test_parse_ids():
    assert parse_ids("1-3,7") == {1, 2, 3, 7}
    assert parse_ids(None) is None and parse_ids("all") is None
    assert parse_ids([1, "4-5"]) == {1, 4, 5}
    with pytest.raises(ProblemError):
        parse_ids("one")


def test_builtin_suite_is_complete():
    problems = load_builtin()
    by_level = {lvl: [p for p in problems if p.level == lvl] for lvl in (1, 2, 3)}
    assert len(problems) >= 12 and len(by_level[1]) >= 6 and len(by_level[2]) >= 4 and len(by_level[3]) >= 2
    for p in problems:
        assert {"cpu", "gpu"} <= set(p.sizes), p.key
        cpu, gpu = load_builtin(names=[p.key], size="cpu")[0], load_builtin(names=[p.key], size="gpu")[0]
        assert cpu.flops and cpu.bytes and gpu.flops > cpu.flops, p.key
        assert p.ops, p.key


def test_resolve_names_and_paths(tmp_path):
    assert resolve_problem("level1/1_ReLU").key == "level1/1_ReLU"
    assert resolve_problem("1_ReLU", size="cpu").size == "cpu"
    assert resolve_problem("relu").key == "level1/1_ReLU"
    path = write(tmp_path, "level1/9_Mine.py", GOOD)
    assert resolve_problem(str(path)).key == "level1/9_Mine"
    with pytest.raises(ProblemError, match="no such file, and no built-in problem"):
        resolve_problem("nonexistent_problem")
    with pytest.raises(ProblemError, match="no such problem file"):
        resolve_problem(str(tmp_path / "missing.py"))


def test_problem_roundtrip_and_floor():
    p = problem_from_source(GOOD, where="<test>", name="x", size="cpu")
    q = type(p).from_dict(p.to_dict())
    assert q == p
    assert p.floor_seconds(1e9, 1e9) == max(p.flops / 1e9, p.bytes / 1e9)

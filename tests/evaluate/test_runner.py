"""`kforge eval`: KernelBench's generations layout, manifests, resume, bad files, the summary, end to end."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kforge.backends import get_backend
from kforge.cli import main
from kforge.evaluate import (
    CandidateFile,
    EvalInputError,
    discover,
    load_results,
    make_row,
    parse_generation_name,
    read_manifest,
    render_markdown,
    render_text,
    run_eval,
    summarise,
)
from kforge.problems import BUILTIN_DIR
from kforge.sandbox.gpus import detect_gpus
from kforge.verify import Verifier
from tests.helpers import CANDIDATES, fast_config

SOLUTIONS = BUILTIN_DIR / "solutions" / "cpu"
GARBAGE = b"\x00\x01\xfe this is not Python {{{"
TORCH_SOFTMAX = (b"import torch\n\nclass ModelNew(torch.nn.Module):\n"
                 b"    def forward(self, x):\n        return x.softmax(-1)\n")


def kernelbench(root: Path, problems=("1_ReLU", "2_Softmax")) -> Path:
    """A KernelBench checkout holding some of the built-in level-1 problems (their KFORGE sizes included)."""
    level = root / "KernelBench" / "level1"
    level.mkdir(parents=True, exist_ok=True)
    for name in problems:
        shutil.copy(BUILTIN_DIR / "level1" / f"{name}.py", level / f"{name}.py")
    return root


def generations(root: Path, files: dict[str, Path | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (root / name).write_bytes(content if isinstance(content, bytes) else content.read_bytes())
    return root


def kb_name(problem_id: int, sample: int, level: int = 1) -> str:
    return f"level_{level}_problem_{problem_id}_sample_{sample}_kernel.py"


# -- layout -------------------------------------------------------------------------------------------
def test_parse_generation_name():
    assert parse_generation_name("level_1_problem_19_sample_0_kernel.py") == (1, 19, 0)
    assert parse_generation_name("level_3_problem_7_sample_12_kernel.py") == (3, 7, 12)
    for other in ("level_1_problem_19_sample_0_prompt.txt", "level_1_problem_x_sample_0_kernel.py",
                  "level_1_problem_19_kernel.py", "generation_config.yaml", "xlevel_1_problem_1_sample_0_kernel.py"):
        assert parse_generation_name(other) is None, other


def test_discover_matches_each_file_to_its_problem(tmp_path):
    kb = kernelbench(tmp_path / "KB")
    relu = SOLUTIONS / "level1" / "1_ReLU.py"
    gen = generations(tmp_path / "run", {kb_name(1, 1): relu, kb_name(1, 0): relu, kb_name(2, 0): relu,
                                          kb_name(99, 0): relu, "notes.py": b"x = 1\n",
                                          "level_1_problem_1_sample_0_prompt.txt": b"a prompt",
                                          "generation_config.yaml": b"level: 1\n"})
    for root in (kb, kb / "KernelBench"):  # a checkout or its inner folder
        found = discover(root, gen, "cpu")
        assert [(j.level, j.problem_id, j.sample_id) for j in found.jobs] == \
            [(1, 1, 0), (1, 1, 1), (1, 2, 0), (1, 99, 0)]
        assert [Path(j.problem).name if j.problem else None for j in found.jobs] == \
            ["1_ReLU.py", "1_ReLU.py", "2_Softmax.py", None]
        assert [j.error for j in found.jobs[:3]] == [None] * 3 and "no problem level1/99_*.py" in found.jobs[3].error
        assert found.ignored == ["notes.py"] and {j.backend for j in found.jobs} == {"cpu"}
    assert [j.problem_id for j in discover(kb, gen, "cpu", ids="2-5").jobs] == [2]
    # one sample written twice (its numbers padded): counted once, the other an error row naming it
    shutil.copy(relu, gen / "level_01_problem_2_sample_0_kernel.py")
    twice = [j for j in discover(kb, gen, "cpu").jobs if j.problem_id == 2]
    assert [(j.candidate.name, j.error) for j in twice] == [
        ("level_1_problem_2_sample_0_kernel.py", None),
        ("level_01_problem_2_sample_0_kernel.py", "the same sample as level_1_problem_2_sample_0_kernel.py (its "
         "numbers written otherwise); judged there")]
    (gen / "level_01_problem_2_sample_0_kernel.py").unlink()
    # named as a sample but nothing to read: a row says so (it was ignored as "not named" so)
    (gen / kb_name(1, 5)).symlink_to(tmp_path / "gone.py")
    (gen / kb_name(2, 5)).mkdir()
    unreadable = [j for j in discover(kb, gen, "cpu").jobs if j.sample_id == 5]
    assert [j.error for j in unreadable] == ["not a file that can be read (a folder, or a link to nothing)"] * 2
    assert unreadable[0].candidate == gen / kb_name(1, 5)
    (gen / kb_name(1, 5)).unlink()
    (gen / kb_name(2, 5)).rmdir()
    # Two files claiming one id is a malformed tree: the sample says so instead of guessing.
    shutil.copy(BUILTIN_DIR / "level1" / "1_ReLU.py", kb / "KernelBench" / "level1" / "1_ReLU_copy.py")
    assert "several problem files match level1/1_*.py" in discover(kb, gen, "cpu").jobs[0].error


def test_discover_reports_unusable_inputs(tmp_path):
    kb = kernelbench(tmp_path / "KB")
    with pytest.raises(EvalInputError, match="no such generations directory"):
        discover(kb, tmp_path / "missing", "cpu")
    (tmp_path / "empty" / "run_a").mkdir(parents=True)
    with pytest.raises(EvalInputError, match="not at runs/"):
        discover(kb, tmp_path / "empty", "cpu")
    with pytest.raises(EvalInputError, match="not a KernelBench layout"):
        discover(tmp_path / "empty", tmp_path / "empty", "cpu")


# -- manifest -----------------------------------------------------------------------------------------
def test_manifest_csv_and_jsonl(tmp_path):
    shutil.copy(CANDIDATES / "cpu" / "relu_ok.py", tmp_path / "relu_ok.py")
    kernelbench(tmp_path / "KB")
    (tmp_path / "m.csv").write_text("problem,candidate,backend\n"
                                    "level1/1_ReLU,relu_ok.py,\n"
                                    f"KB/KernelBench/level1/2_Softmax.py,{tmp_path / 'x' / kb_name(2, 3)},triton\n")
    (tmp_path / "m.jsonl").write_text(json.dumps({"problem": "ReLU", "candidate": "relu_ok.py"}) + "\n\n"
                                      + json.dumps({"problem": "level1/1_ReLU", "candidate": "/abs/c.py",
                                                    "backend": "cuda"}) + "\n")
    csv_jobs = read_manifest(tmp_path / "m.csv", "cpu")
    assert csv_jobs[0] == CandidateFile(tmp_path / "relu_ok.py", "level1/1_ReLU", "cpu")
    assert csv_jobs[1].problem == str(tmp_path / "KB/KernelBench/level1/2_Softmax.py")
    assert csv_jobs[1].backend == "triton" and csv_jobs[1].sample_id == 3  # KernelBench names keep their sample
    jl = read_manifest(tmp_path / "m.jsonl", "cpu")
    assert [(j.candidate, j.problem, j.backend) for j in jl] == [
        (tmp_path / "relu_ok.py", "ReLU", "cpu"), (Path("/abs/c.py"), "level1/1_ReLU", "cuda")]

    for name, text, message in (("a.csv", "problem,file\nrelu,x.py\n", "header lacks candidate"),
                                ("b.jsonl", '{"problem": "relu", "candidate": "x.py"}\n{oops\n', "b.jsonl:2: not JSON"),
                                ("c.csv", "problem,candidate\nrelu,\n", "c.csv:2: every row needs"),
                                ("d.csv", "problem,candidate\n", "lists no candidates")):
        (tmp_path / name).write_text(text)
        with pytest.raises(EvalInputError, match=message):
            read_manifest(tmp_path / name, "cpu")
    with pytest.raises(EvalInputError, match="no such manifest"):
        read_manifest(tmp_path / "none.csv", "cpu")


# -- summary ------------------------------------------------------------------------------------------
def _verdict(state, speedup=None, kernel_share=None, flags=None):
    d = {"state": state, "correct": state == "correct", "message": state, "speedup_eager": speedup,
         "speedup_compile": speedup and speedup / 2, "runtime_ms": 1.0 if speedup else None, "rule": None,
         "evidence": {"traceback": "x" * 5000}}
    if kernel_share is not None:
        d["kernel_share"] = kernel_share
    if flags is not None:
        d["problem_flags"] = flags
    return d


def test_summary_per_level_with_kernel_share_and_flags():
    def row(level, pid, sample, verdict=None, error=None):
        file = CandidateFile(Path(f"/g/{kb_name(pid, sample, level)}"), None if error else f"p{pid}", "cuda", level,
                             pid, sample)
        return make_row(file, "h", "gpu", verdict=verdict, error=error)

    rows = [row(1, 1, 0, _verdict("correct", 2.5, 0.9)), row(1, 1, 1, _verdict("correct", 0.5, 0.5)),
            row(1, 2, 0, _verdict("numerical_mismatch")), row(1, 3, 0, error="no problem level1/3_*.py"),
            row(1, 4, 0, _verdict("correct", 40.0, 0.2, flags=["degenerate", "launch_bound"])),
            row(2, 1, 0, _verdict("correct", 1.2)), row(2, 2, 0, _verdict("compilation_failure"))]
    assert len(rows[0]["evidence"]["traceback"]) == 2000  # bulky evidence is trimmed
    assert rows[5]["kernel_share"] is None and rows[5]["problem_flags"] == []  # absent fields read as empty
    s = summarise(rows)
    one, two, every = s["levels"]["1"], s["levels"]["2"], s["all"]
    assert one["candidates"] == 5 and one["verified"] == 4 and one["errors"] == 1
    assert one["correct_pct"] == 75.0  # 3 of 4 verified; the error row is in no rate
    # The degenerate problem's 40x is left out of fast_p and the geomean: 2 correct of 3 counted.
    assert one["fast_p_candidates"] == 3 and one["fast_0"] == pytest.approx(2 / 3)
    assert one["fast_1"] == pytest.approx(1 / 3) and one["fast_2"] == pytest.approx(1 / 3)
    assert one["geomean_speedup"] == pytest.approx((2.5 * 0.5) ** 0.5)
    assert one["kernel_share_mean"] == pytest.approx((0.9 + 0.5 + 0.2) / 3)
    assert one["problem_flags"] == {"degenerate": 1, "launch_bound": 1} and one["degenerate_problems"] == 1
    assert one["states"] == {"correct": 3, "error": 1, "numerical_mismatch": 1}
    assert one["problems"] == 3 and one["problems_solved"] == 2  # the error row names no loaded problem
    assert two["correct_pct"] == 50.0 and two["kernel_share_mean"] is None and two["fast_1"] == 0.5
    assert every["candidates"] == 7 and every["fast_p_candidates"] == 5
    assert summarise(rows, baseline="compile")["levels"]["1"]["fast_1"] == pytest.approx(1 / 3)  # 1.25x only
    untimed = summarise([row(1, 1, 0, _verdict("correct")), row(1, 2, 0, _verdict("runtime_error"))])["all"]
    assert untimed["fast_0"] == 0.5 and untimed["fast_1"] is None and untimed["geomean_speedup"] is None
    text = render_text(s)
    assert text.splitlines()[0].split()[:5] == ["level", "rules", "files", "correct", "fast_0"]
    assert "all" in text and "1 degenerate problem(s) left out of fast_p" in text and "no problem level1/3_*.py" in text
    assert "| 2 | kforge | 2 | 50.0% |" in render_markdown(s)
    assert "| 1 | kforge | 4 of 5 | 75.0% |" in render_markdown(s)  # the rates are over the 4 verified
    # The same figures under KernelBench's rules, side by side: a kernel_unused row (PyTorch computed its answer,
    # honestly) is correct there and not under kforge's.
    kept = [row(1, 1, 0, _verdict("correct")), row(1, 2, 0, _verdict("kernel_unused"))]
    kept[1]["states"] = {"kforge": "kernel_unused", "kernelbench": "correct", "strict": "kernel_unused"}
    both = summarise(kept)["rules"]
    assert both["kforge"]["all"]["correct_pct"] == 50.0 and both["kernelbench"]["all"]["correct_pct"] == 100.0
    assert both["kernelbench"]["all"]["states"] == {"correct": 2}
    lines = render_text(summarise(kept)).splitlines()
    assert lines[1].split()[:4] == ["1", "kforge", "2", "50.0%"] and lines[2].split()[:4] == ["1", "kernelbench", "2",
                                                                                           "100.0%"]


def test_the_summary_says_the_precision_and_what_each_rule_set_leaves_out():
    """At bf16 a softmax over long rows is degenerate under KernelBench's 1e-2 alone (a constant passes there, not
    against the float32 truth): it left the kforge rows' figures too, and fast_0 read above the correct rate."""
    def row(pid, verdict, precision="bf16"):
        r = make_row(CandidateFile(Path(f"/g/{kb_name(pid, 0, 1)}"), f"p{pid}", "cpu", 1, pid, 0), "h", "cpu",
                     verdict=verdict)
        r["judged"] = {"precision": precision, "rules": "kforge"}
        return r

    rows = [row(1, _verdict("correct", 2.0, 0.9)), row(2, _verdict("correct", 3.0, 0.8, flags=["degenerate_kernelbench"]))]
    s = summarise(rows)
    assert s["judged"]["precision"] == ["bf16"]
    assert s["rules"]["kforge"]["all"]["fast_p_candidates"] == 2 and s["rules"]["kforge"]["all"]["degenerate_problems"] == 0
    assert s["rules"]["kernelbench"]["all"]["fast_p_candidates"] == 1
    assert s["rules"]["kernelbench"]["all"]["degenerate_names"] == ["p2"]
    text = render_text(s)
    assert "judged at bf16 (inputs and weights cast" in text and "kernelbench: 1 degenerate problem(s)" in text
    assert "kforge: " not in text.split("judged at")[1].split("rules:")[0]
    assert render_markdown(s).startswith("# kforge eval at bf16")
    # nothing verified (every problem missing): the precision the run asked for, not fp32
    missing = make_row(CandidateFile(Path(f"/g/{kb_name(3, 0, 1)}"), "p3", "cpu", 1, 3, 0), "h", "cpu", error="gone")
    missing["judged"] = {"precision": "bf16", "rules": "kforge"}
    assert render_markdown(summarise([missing])).startswith("# kforge eval at bf16")
    untimed = render_text(summarise([row(1, _verdict("correct"))]))
    assert "nothing was timed (--no-timing): fast_0 is the share correct" in untimed


# -- running: resume and bad files --------------------------------------------------------------------
def test_run_eval_resumes_by_path_and_content(tmp_path, pool):
    kb = kernelbench(tmp_path / "KB", problems=("1_ReLU",))
    gen = generations(tmp_path / "run", {kb_name(1, 0): CANDIDATES / "cpu" / "relu_torch_only.py",
                                         kb_name(1, 1): GARBAGE, kb_name(2, 0): TORCH_SOFTMAX})
    out = tmp_path / "rows.jsonl"
    verifier = Verifier(fast_config(require_kernel=False, skip_timing=True, trials=1), pool=pool)
    backends = {"cpu": get_backend("cpu")}

    def run():
        before = pool.counters["run"]
        res = run_eval(discover(kb, gen, "cpu").jobs, verifier, backends, size_of=lambda b: "cpu", out=out,
                       threads=2, progress=False)
        return res, pool.counters["run"] - before

    first, runs = run()
    assert runs == 1 and first.verified == 2 and first.resumed == 0
    assert [(r["sample_id"], r["problem_id"], r["state"]) for r in first.rows] == \
        [(0, 1, "correct"), (1, 1, "generation_failure"), (0, 2, "error")]
    assert first.rows[0]["problem"] == "level1/1_ReLU" and first.rows[0]["size"] == "cpu"
    assert "no problem level1/2_*.py" in first.rows[2]["error"]

    with open(out, "a") as fh:
        fh.write('{"candidate": "/cut/off/mid-')  # as a killed run may leave it
    again, runs = run()  # nothing new: no worker runs, the rows are the file's; the error row is replaced
    assert runs == 0 and again.verified == 0 and again.resumed == 2
    assert [r["state"] for r in again.rows] == ["correct", "generation_failure", "error"]
    assert len(out.read_text().splitlines()) == 3

    # A changed file is verified again; a sample whose problem has appeared since is tried again.
    (gen / kb_name(1, 0)).write_text((CANDIDATES / "cpu" / "relu_torch_only.py").read_text() + "# v2\n")
    shutil.copy(BUILTIN_DIR / "level1" / "2_Softmax.py", kb / "KernelBench" / "level1" / "2_Softmax.py")
    third, runs = run()
    assert third.verified == 2 and third.resumed == 1 and runs == 2
    assert [r["state"] for r in third.rows] == ["correct", "generation_failure", "correct"]
    assert third.rows[2]["problem"] == "level1/2_Softmax" and third.rows[2]["error"] is None
    # One row per file: the retried error row and the changed file's row replaced, the cut-off line gone.
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 3 and len(load_results(out)) == 3
    assert sorted((r["sample_id"], r["problem_id"], r["state"]) for r in lines) == \
        [(0, 1, "correct"), (0, 2, "correct"), (1, 1, "generation_failure")]
    fourth, runs = run()  # a finished evaluation run again verifies nothing and the file stays as it is
    assert runs == 0 and fourth.verified == 0 and fourth.resumed == 3
    assert [json.loads(line) for line in out.read_text().splitlines()] == lines



def test_a_file_the_busy_gpu_left_unjudged_is_an_error_row_a_rerun_judges(tmp_path, pool, monkeypatch):
    from kforge.sandbox.memory import DeviceBusy
    kb = kernelbench(tmp_path / "KB", problems=("1_ReLU",))
    gen = generations(tmp_path / "run", {kb_name(1, 0): CANDIDATES / "cpu" / "relu_torch_only.py"})
    out = tmp_path / "rows.jsonl"
    verifier = Verifier(fast_config(require_kernel=False, skip_timing=True, trials=1), pool=pool)
    real = Verifier.verify

    def busy(self, *args, **kwargs):
        raise DeviceBusy("the device ran out of memory while other processes held 122.0 GiB of its 139.8 GiB")

    def run():
        return run_eval(discover(kb, gen, "cpu").jobs, verifier, {"cpu": get_backend("cpu")},
                        size_of=lambda b: "cpu", out=out, threads=1, progress=False)

    monkeypatch.setattr(Verifier, "verify", busy)
    first = run()
    assert [r["state"] for r in first.rows] == ["error"] and "122.0 GiB" in first.rows[0]["error"]
    monkeypatch.setattr(Verifier, "verify", real)
    again = run()  # the load has gone: the file is judged, and its row replaces the error row
    assert again.verified == 1 and [r["state"] for r in again.rows] == ["correct"]
    assert [json.loads(line)["state"] for line in out.read_text().splitlines()] == ["correct"]

# -- the command --------------------------------------------------------------------------------------
def test_eval_command_end_to_end(tmp_path, cache_dir):
    """Oracle kernels, a candidate that kills its worker, garbage, no kernel, a missing problem: one table."""
    kb = kernelbench(tmp_path / "KB")
    gen = generations(tmp_path / "run", {
        kb_name(1, 0): SOLUTIONS / "level1" / "1_ReLU.py", kb_name(1, 1): CANDIDATES / "cpu" / "relu_null_write.py",
        kb_name(1, 2): GARBAGE, kb_name(1, 3): CANDIDATES / "cpu" / "relu_torch_only.py",
        kb_name(2, 0): SOLUTIONS / "level1" / "2_Softmax.py", kb_name(7, 0): SOLUTIONS / "level1" / "1_ReLU.py"})
    args = ["eval", str(kb), str(gen), "--size", "cpu", "--trials", "1", "--no-timing", "--no-compile-ref",
            "--no-progress"]
    # In a fresh interpreter: `kforge eval` without --mlflow must not import mlflow or litellm.
    code = ("import sys, json; from kforge.cli import main; rc = main(sys.argv[1:]); "
            "print(json.dumps({'rc': rc, 'heavy': [m for m in ('mlflow', 'litellm') if m in sys.modules]}))")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == {"rc": 0, "heavy": []}
    assert "6 file(s): 5 verified now, 0 already in kforge_eval.jsonl" in res.stdout
    rows = {(r["problem_id"], r["sample_id"]): r for r in load_results(gen / "kforge_eval.jsonl").values()}
    states = {k: r["state"] for k, r in rows.items()}
    assert states == {(1, 0): "correct", (1, 1): "runtime_error", (1, 2): "generation_failure",
                      (1, 3): "kernel_unused", (2, 0): "correct", (7, 0): "error"}, rows
    assert "SIGSEGV" in rows[(1, 1)]["message"] and rows[(1, 3)]["rule"] == "kernel_not_run"
    for key in ("state", "correct", "speedup_eager", "speedup_compile", "runtime_ms", "ref_runtime_ms", "rule",
                "message", "level", "problem_id", "sample_id", "candidate", "candidate_hash", "backend"):
        assert key in rows[(1, 0)], key
    summary = json.loads((gen / "kforge_eval.summary.json").read_text())
    assert summary["all"]["correct_pct"] == 40.0 and summary["all"]["fast_1"] is None  # untimed
    assert summary["levels"]["1"]["states"]["error"] == 1 and summary["verified_now"] == 5
    assert "| 1 | kforge | 5 of 6 | 40.0% | 40.0% | - |" in (gen / "kforge_eval.summary.md").read_text()
    # PyTorch computed (1, 3)'s answer: not kforge's correct, KernelBench's all the same
    assert rows[(1, 3)]["states"]["kernelbench"] == "correct" and summary["rules"]["kernelbench"]["all"]["correct"] == 3
    assert "runtime_error=1" in res.stdout and "no problem level1/7_*.py" in res.stdout

    res = subprocess.run([sys.executable, "-m", "kforge.cli", *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "6 file(s): 0 verified now, 5 already in kforge_eval.jsonl" in res.stdout
    assert len((gen / "kforge_eval.jsonl").read_text().splitlines()) == 6  # one row per file, twice run


def test_eval_logs_to_mlflow(tmp_path, capsys):
    """A parent run with the summary's metrics, a finished nested run per file (none of these starts a worker)."""
    from mlflow.tracking import MlflowClient
    kb = kernelbench(tmp_path / "KB", problems=("1_ReLU",))
    gen = generations(tmp_path / "run", {kb_name(1, 0): b"Sorry, I cannot write this kernel.\n",
                                         kb_name(1, 1): GARBAGE, kb_name(3, 0): GARBAGE})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["eval", str(kb), str(gen), "--mlflow", uri, "--no-progress", "--out", str(tmp_path / "r.jsonl")]
    assert main(argv) == 0 and main(argv) == 0  # the second run verifies nothing, and logs the whole evaluation
    assert f"in {uri}" in capsys.readouterr().out
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("kforge-eval")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("kforge.kind") == "eval"]
    assert len(parents) == 2
    kids = {p.info.run_id: [r for r in runs if r.data.tags.get("mlflow.parentRunId") == p.info.run_id] for p in parents}
    assert [len(k) for k in kids.values()] == [3, 3]
    parent = parents[0]
    children = kids[parent.info.run_id]
    assert parent.info.status == "FINISHED" and parent.data.metrics["candidates"] == 3
    assert parent.data.metrics["level1.errors"] == 1 and parent.data.params["backends"] == "cpu"
    assert sorted(c.data.tags["state"] for c in children) == ["error", "generation_failure", "generation_failure"]
    prose = next(c for c in children if c.data.tags["problem_id"] == "1" and c.data.tags["sample_id"] == "0")
    assert prose.data.metrics["correct"] == 0.0 and prose.data.tags["state"] == "generation_failure"
    assert prose.data.tags["precision"] == "fp32"  # what the file was judged at, on its own run
    assert {a.path for a in client.list_artifacts(prose.info.run_id)} == {"kernel.py", "verdict.json"}
    kernel = Path(client.download_artifacts(prose.info.run_id, "kernel.py", str(tmp_path / "dl")))
    assert kernel.read_text() == "Sorry, I cannot write this kernel.\n"  # the file as it was, for a person to read
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} == {"r.jsonl", "r.summary.json", "r.summary.md"}
    failed = next(c for c in children if c.data.tags["state"] == "error")
    assert failed.info.status == "FAILED"


def test_eval_usage_errors_exit_two(tmp_path, capsys):
    kb = kernelbench(tmp_path / "KB", problems=("1_ReLU",))
    gen = generations(tmp_path / "run", {kb_name(1, 0): GARBAGE})
    (tmp_path / "m.csv").write_text("problem,candidate,backend\nrelu,x.py,metal9\n")
    cases = [(["eval"], "name PROBLEMS_DIR and GENERATIONS_DIR"),
             (["eval", str(kb), str(tmp_path / "nope")], "no such generations directory"),
             (["eval", str(tmp_path / "nope"), str(gen)], "no such directory"),
             (["eval", str(kb), str(gen), "--manifest", str(tmp_path / "m.csv")], "not both"),
             (["eval", "--manifest", str(tmp_path / "m.csv")], "unknown backend 'metal9'"),
             (["eval", "--manifest", str(tmp_path / "m.csv"), "--ids", "1"], "a manifest lists its own")]
    if not detect_gpus():
        cases.append((["eval", str(kb), str(gen), "--backend", "cuda"], "none is visible here"))
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv


def test_a_rerun_judging_otherwise_does_not_take_over_the_rows(tmp_path, capsys):
    """A rows file is resumed only by a run judging as its rows were judged: the fp32 verdicts of a first run are
    not a `--precision bf16` run's, nor a `--rules kernelbench` one's. The run refuses before verifying anything,
    says what differs and what to do, and the file stays as it was."""
    kb = kernelbench(tmp_path / "KB", problems=("1_ReLU",))
    gen = generations(tmp_path / "run", {kb_name(1, 0): b"Sorry, I cannot write this kernel.\n", kb_name(1, 1): GARBAGE})
    out = tmp_path / "r.jsonl"
    argv = ["eval", str(kb), str(gen), "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    rows = out.read_text()
    assert all(json.loads(line)["judged"]["precision"] == "fp32" for line in rows.splitlines())
    capsys.readouterr()
    for extra, said in ((["--precision", "bf16"], "precision=fp32, and this run judges under precision=bf16"),
                        (["--rules", "kernelbench"], "rules=kforge, and this run judges under rules=kernelbench"),
                        (["--no-variants"], "variants=True, and this run judges under variants=False")):
        assert main(argv + extra) == 2, extra
        err = capsys.readouterr().err
        assert f"{out} holds 2 verdict row(s) judged under {said}" in err and "another --out FILE" in err, err
        assert out.read_text() == rows
    assert main(argv + ["--precision", "bf16", "--out", str(tmp_path / "bf16.jsonl")]) == 0
    assert main(argv) == 0 and "0 verified now, 2 already in r.jsonl" in capsys.readouterr().out
    # Rows written before rows said what they were judged under still carry their verdict's precision.
    legacy = [{k: v for k, v in json.loads(line).items() if k != "judged"} for line in rows.splitlines()]
    out.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    assert main(argv + ["--precision", "fp16"]) == 2 and "precision=fp32" in capsys.readouterr().err
    assert main(argv) == 0


def test_a_rerun_resumes_rows_of_a_problem_without_size_presets(tmp_path, capsys):
    """KernelBench's files have no ``KFORGE["sizes"]``: each row's problem ran at ``size=default`` while the run
    asked for the cpu preset, and the identical rerun was refused as judged under another size."""
    level = tmp_path / "KB" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "1_ReLU.py").write_text(
        "import torch\nimport torch.nn as nn\n\nbatch_size = 16\ndim = 64\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(x)\n\n\n"
        "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")
    gen = generations(tmp_path / "run", {kb_name(1, 0): CANDIDATES / "cpu" / "relu_torch_only.py"})
    out = tmp_path / "r.jsonl"
    argv = ["eval", str(tmp_path / "KB"), str(gen), "--no-progress", "--no-timing", "--out", str(out)]
    assert main(argv) == 0
    row = json.loads(out.read_text())
    assert row["size"] == "default" and row["state"] != "error" and row["judged"]["size"] == "cpu"
    capsys.readouterr()
    assert main(argv) == 0 and "0 verified now, 1 already in r.jsonl" in capsys.readouterr().out


def test_eval_notices_go_through_logging_to_stderr(tmp_path, capsys, caplog):
    """The command's notices are `kforge.cli.eval` log records, printed on stderr once each (the rows and the
    summary stay on stdout); a second run in the same process prints them once again, not twice."""
    import logging
    caplog.set_level(logging.INFO, logger="kforge")
    kb = kernelbench(tmp_path / "KB", problems=("1_ReLU",))
    gen = generations(tmp_path / "run", {kb_name(1, 0): GARBAGE, "notes.py": b"# not a generation\n"})
    argv = ["eval", str(kb), str(gen), "--no-progress", "--out", str(tmp_path / "r.jsonl")]
    for _ in range(2):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert err.count("ignoring 1 .py file(s) not named level_L_problem_ID_sample_S_kernel.py: notes.py\n") == 1
        assert err.count("kforge eval: 1 file(s) from ") == 1 and "1 file(s): " in out and "ignoring" not in out
    assert {(r.name, r.levelname) for r in caplog.records} >= {("kforge.cli.eval", "WARNING"),
                                                               ("kforge.cli.eval", "INFO")}


def test_out_that_is_not_a_rows_file_is_refused_before_anything_is_written(tmp_path):
    """`--out` named a generation or the manifest and the evaluation overwrote it with its rows."""
    from kforge.evaluate.rows import not_a_rows_file
    generation = tmp_path / "level_1_problem_1_sample_0_kernel.py"
    generation.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    assert "line 1 is not a row" in not_a_rows_file(generation)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"problem": "level1/1_ReLU", "candidate": "a.py"}\n')
    assert "would overwrite" in not_a_rows_file(manifest)
    assert "is a directory" in not_a_rows_file(tmp_path)
    rows = tmp_path / "rows.jsonl"
    assert not_a_rows_file(rows) is None  # a new file
    row = '{"candidate": "a.py", "backend": "cpu", "state": "correct"}\n'
    rows.write_text(row + row + '{"candidate": "b.py", "back')  # the last line cut off by a kill
    assert not_a_rows_file(rows) is None
    rows.write_text(row + "garbage\n" + row)
    assert "line 2" in not_a_rows_file(rows)


def test_a_csv_row_with_more_fields_than_the_header_names_its_line(tmp_path):
    from kforge.evaluate import read_manifest
    from kforge.evaluate.runner import EvalInputError
    manifest = tmp_path / "m.csv"
    manifest.write_text("problem,candidate\nlevel1/1_ReLU,a.py,extra\n")
    with pytest.raises(EvalInputError, match=r"m.csv:2: 1 field\(s\) more than the header's columns"):
        read_manifest(manifest, "cpu")


def test_a_sigterm_ends_an_evaluation_as_ctrl_c_does_rows_kept(tmp_path):
    """A scheduler's SIGTERM ended `kforge eval` with exit 143, no word, and its pool's folder left in /tmp."""
    import os
    import signal
    import time
    kb = kernelbench(tmp_path / "KB")
    slow = b"import time\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n" \
           b"    def forward(self, x):\n        time.sleep(0.5)\n        return torch.relu(x)\n"
    gen = generations(tmp_path / "run", {kb_name(1, s): slow for s in range(6)})
    out = tmp_path / "rows.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "kforge.cli", "eval", str(kb), str(gen), "--no-timing",
                             "--no-kernel-check", "--jobs", "1", "--out", str(out), "--no-progress"],
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True"))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and not (out.is_file() and out.read_text().strip()):
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()[-2000:]
    proc.send_signal(signal.SIGTERM)
    rc, err = proc.wait(timeout=120), proc.stderr.read()
    assert rc == 130 and "kforge: interrupted; finished rows are kept" in err, (rc, err[-2000:])
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert 1 <= len(rows) < 6 and all(r["state"] == "correct" for r in rows), rows

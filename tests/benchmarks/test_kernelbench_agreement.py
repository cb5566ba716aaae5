"""benchmarks/kernelbench_agreement.py's parts that need no GPU: the manifest, reading both harnesses'
records, the join and its table, the child-process runner, and KernelBench's import with stand-ins.

Every input is built here (a tiny fake KernelBench tree, records shaped as the two harnesses write them);
nothing fetched from KernelBench is used.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kforge.evaluate import read_manifest as kforge_read_manifest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


agreement = _load("kernelbench_agreement")
table = sys.modules["kernelbench_agreement_table"]

REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
CAND = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.clone()\n"


@pytest.fixture
def tree(tmp_path):
    """A KernelBench-like checkout (one problem) and a corpus folder with an older problem and candidates."""
    kb = tmp_path / "KB"
    (kb / "KernelBench" / "level1").mkdir(parents=True)
    (kb / "KernelBench" / "level1" / "19_ReLU.py").write_text(REF)
    (kb / "src" / "kernelbench").mkdir(parents=True)
    (kb / "src" / "kernelbench" / "eval.py").write_text("")
    corpus = tmp_path / "corpus"
    (corpus / "old").mkdir(parents=True)
    (corpus / "old" / "1_Square.py").write_text(REF)
    for name in ("a/relu.py", "a/square.py", "b/relu.py"):
        (corpus / name).parent.mkdir(exist_ok=True)
        (corpus / name).write_text(CAND)
    return kb, corpus


def _csv(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


def test_manifest_resolves_problems_in_the_checkout_then_beside_the_manifest(tree):
    kb, corpus = tree
    m = _csv(corpus / "m.csv", [["problem", "candidate", "source"],
                                ["KernelBench/level1/19_ReLU.py", "a/relu.py", "model-a"],
                                ["old/1_Square.py", "a/square.py", ""],
                                [str(kb / "KernelBench/level1/19_ReLU.py"), "b/relu.py", ""]])
    entries = table.read_manifest(m, kb)
    assert [e.problem for e in entries] == [(kb / "KernelBench/level1/19_ReLU.py").resolve(),
                                           (corpus / "old/1_Square.py").resolve(),
                                           (kb / "KernelBench/level1/19_ReLU.py").resolve()]
    assert [e.candidate for e in entries] == [(corpus / n).resolve() for n in ("a/relu.py", "a/square.py", "b/relu.py")]
    assert [e.source for e in entries] == ["model-a", "a", "b"]  # no source: the candidate's folder
    assert [e.name for e in entries] == ["a/relu.py", "a/square.py", "b/relu.py"]
    assert [e.backend for e in entries] == ["cuda"] * 3  # no backend column: --backend's default
    keys = [e.key for e in entries]
    assert len(set(keys)) == 3 and all("/" not in k for k in keys)
    assert keys == [e.key for e in table.read_manifest(m, kb)]  # stable across runs: resuming joins on it


def test_manifest_jsonl_reads_like_csv(tree):
    kb, corpus = tree
    m = corpus / "m.jsonl"
    m.write_text(json.dumps({"problem": "KernelBench/level1/19_ReLU.py", "candidate": "a/relu.py"}) + "\n\n")
    [e] = table.read_manifest(m, kb)
    assert e.candidate == (corpus / "a/relu.py").resolve() and e.source == "a"


@pytest.mark.parametrize("rows, message", [
    ([["problem", "file"], ["x", "y"]], "lacks candidate"),
    ([["problem", "candidate"], ["KernelBench/level1/2_Missing.py", "a/relu.py"]], "looked for"),
    ([["problem", "candidate"], ["KernelBench/level1/19_ReLU.py", "a/nothing.py"]], "is not a file"),
    ([["problem", "candidate"], ["KernelBench/level1/19_ReLU.py", "a/relu.py"],
      ["old/1_Square.py", "a/relu.py"]], "listed twice (first on line 2)"),
    ([["problem", "candidate"], ["", "a/relu.py"]], "needs a problem and a candidate"),
    ([["problem", "candidate"]], "lists no candidates"),
    ([["problem", "candidate", "backend"], ["KernelBench/level1/19_ReLU.py", "a/relu.py", "tilelang"]],
     "backend 'tilelang' is neither of cuda, triton"),
])
def test_bad_manifests_are_named_errors(tree, rows, message):
    kb, corpus = tree
    with pytest.raises(table.AgreementInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        table.read_manifest(_csv(corpus / "m.csv", rows), kb)


def test_the_generated_kforge_manifest_is_one_kforge_eval_reads(tree, tmp_path):
    kb, corpus = tree
    rows = [["problem", "candidate", "backend"], ["KernelBench/level1/19_ReLU.py", "a/relu.py", ""],
            ["old/1_Square.py", "b/relu.py", "cuda"]]
    entries = table.read_manifest(_csv(corpus / "m.csv", rows), kb, "triton")
    assert [e.backend for e in entries] == ["triton", "cuda"]  # the row's own backend wins over --backend
    path = table.write_kforge_manifest(entries, tmp_path / "out" / "kforge_manifest.csv")
    jobs = kforge_read_manifest(path, "cpu")
    assert [(j.candidate, Path(j.problem), j.backend) for j in jobs] == \
        [(e.candidate, e.problem, b) for e, b in zip(entries, ("triton", "cuda"))]


# Records shaped as the child writes them from KernelBench's KernelExecResult (runtimes in ms).
KB_RECORDS = {
    "correct": ({"status": "result", "compiled": True, "correctness": True, "runtime": 0.5, "ref_runtime": 1.0,
                 "metadata": {"correctness_trials": "(5 / 5)"}}, True, ""),
    "compile": ({"status": "result", "compiled": False, "correctness": False,
                 "metadata": {"compilation_error_name": "RuntimeError",
                              "compilation_error": "Error building extension"}},
                False, "compile"),
    "syntax": ({"status": "result", "compiled": False, "metadata": {"compilation_error_name": "SyntaxError"}},
               False, "compile"),
    "launch": ({"status": "result", "compiled": True, "correctness": False,
                "metadata": {"runtime_error": "illegal memory access", "runtime_error_name": "torch.AcceleratorError"}},
               False, "runtime"),
    "raised": ({"status": "result", "compiled": False, "correctness": False,
                "metadata": {"cuda_error": "CUDA error: an illegal memory access"}}, False, "runtime"),
    "values": ({"status": "result", "compiled": True, "correctness": False, "runtime": -1.0, "ref_runtime": 2.0,
                "metadata": {"correctness_issue": "Output mismatch", "max_difference": ["0.031250"]}},
               False, "mismatch"),
    "shape": ({"status": "result", "compiled": True, "correctness": False,
               "metadata": {"correctness_issue": "Output shape mismatch: Expected [2], got [1]"}}, False, "mismatch"),
    "hang": ({"status": "timeout", "error": "killed after 180 s"}, False, "timeout"),
    "died": ({"status": "crash", "error": "exit status -11"}, False, "crash"),
    "lock": ({"status": "none", "error": "returned None"}, False, "error"),
}


@pytest.mark.parametrize("name", sorted(KB_RECORDS))
def test_kernelbench_records_become_verdicts_with_an_error_class(name):
    rec, correct, cls = KB_RECORDS[name]
    v = table.classify_kernelbench(rec)
    assert (v.correct, v.error_class) == (correct, cls)
    assert v.label == ("correct" if correct else f"not correct ({cls})")
    assert v.speedup == (2.0 if name == "correct" else None)  # a speedup only for a correct candidate
    if name == "values":
        assert "0.031250" in v.message


def test_kforge_rows_give_both_rule_sets_states():
    v = table.classify_kforge({"state": "correct", "states": {"kernelbench": "correct", "kforge": "cheat_detected"},
                               "speedup_eager": 1.5, "rule": "", "message": ""})
    assert (v.state, v.kforge_state, v.speedup, v.correct) == ("correct", "cheat_detected", 1.5, True)
    old = table.classify_kforge({"state": "numerical_mismatch", "rule": "allclose", "message": "max\nerror 1e-3"})
    assert (old.kforge_state, old.speedup, old.correct, old.message) == (None, None, False, "allclose: max error 1e-3")


def _entries(tree, n=4):
    kb, corpus = tree
    names = ["a/relu.py", "a/square.py", "b/relu.py"]
    extra = []
    for i in range(3, n):
        (corpus / f"c{i}.py").write_text(CAND)
        extra.append(f"c{i}.py")
    rows = [["problem", "candidate", "source"]] + [["KernelBench/level1/19_ReLU.py", c, "s"] for c in names + extra]
    return table.read_manifest(_csv(corpus / "m.csv", rows), kb)


def _kf(state, kforge_state, speed=None):
    return {"state": state, "states": {"kernelbench": state, "kforge": kforge_state}, "speedup_eager": speed}


def test_join_counts_agreement_lists_every_disagreement_and_what_is_pending(tree):
    e = _entries(tree, 5)
    kb = {e[0].key: KB_RECORDS["correct"][0], e[1].key: KB_RECORDS["values"][0],
          e[2].key: KB_RECORDS["correct"][0], e[3].key: KB_RECORDS["compile"][0]}
    mismatch = _kf("numerical_mismatch", "numerical_mismatch")
    kf = {str(e[0].candidate): _kf("correct", "correct", 1.9), str(e[1].candidate): mismatch,
          str(e[2].candidate): mismatch, str(e[4].candidate): _kf("correct", "correct")}
    rows = table.join(e, kb, kf)
    assert [r.agree for r in rows] == [True, True, False, None, None]
    s = table.summarize(rows)
    assert (s.compared, s.agreed, s.both_correct, s.both_not) == (3, 2, 1, 1)
    assert [r.entry.name for r in s.disagreements] == ["b/relu.py"]
    assert [r.entry.name for r in s.pending] == ["c3.py", "c4.py"]
    lines = table.summary_lines(s)
    assert lines[0].startswith("agreement at fp32: 2/3 candidates") and "1 disagree; 2 pending" in lines[0]
    assert lines[1] == "  s: 2/3 agree of 5 candidates"  # by source: all five rows came from source "s"
    assert "DISAGREE b/relu.py [s]: KernelBench correct" in lines[2] and "numerical_mismatch" in lines[2]
    assert "no kforge verdict" in lines[3] and "no KernelBench verdict" in lines[4]

    text = table.render_text(rows).splitlines()
    assert text[0].split() == list(table.COLUMNS) and len(text) == 6
    assert text[1].split() == ["a/relu.py", "s", "cuda", "correct", "correct", "correct", "2.00", "1.90", "yes"]
    parsed = list(csv.DictReader(io.StringIO(table.render_csv(rows, "bf16"))))
    assert [p["agree"] for p in parsed] == ["yes", "yes", "NO", "", ""]
    assert {p["precision"] for p in parsed} == {"bf16"}
    assert parsed[1]["kb_error"] == "mismatch" and "0.031250" in parsed[1]["kb_message"]
    assert parsed[3]["kforge_kernelbench"] == "pending" and parsed[4]["kernelbench"] == "pending"
    md = table.render_markdown(rows, s)
    assert md.startswith("# KernelBench's harness vs kforge under `--rules kernelbench`, precision fp32")
    assert "\n- s: 2/3 agree of 5 candidates\n" in md
    assert "## Disagreements" in md and md.count("\n| b/relu.py |") == 2  # in the table and among the disagreements
    assert table.summarize(rows, "bf16").precision == "bf16"


def test_read_jsonl_keeps_the_last_row_and_skips_a_cut_off_line(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text('{"key": "a", "n": 1}\n{"key": "b", "n": 1}\n{"key": "a", "n": 2}\n{"key": "c", "n"')
    assert table.read_jsonl(p, "key") == {"a": {"key": "a", "n": 2}, "b": {"key": "b", "n": 1}}
    assert table.read_jsonl(tmp_path / "none.jsonl", "key") == {}


def _py(tmp_path, key, code):
    result, log = tmp_path / f"{key}.json", tmp_path / "logs" / f"{key}.log"
    return key, [sys.executable, "-c", code.replace("RESULT", str(result))], result, log


def test_children_that_hang_or_die_become_records_and_a_deadline_leaves_work_undone(tmp_path):
    jobs = [_py(tmp_path, "ok", "import json; json.dump({'status': 'result', 'compiled': True}, open('RESULT', 'w'))"),
            _py(tmp_path, "died", "import os; print('segfault-ish'); os._exit(3)"),
            _py(tmp_path, "hang", "import time; time.sleep(60)")]
    seen, killed = {}, []
    left = agreement.run_children(jobs, 2, 2.0, agreement.Deadline(None),
                                  lambda k, rec, _s: seen.__setitem__(k, rec), killed.append)
    assert left == [] and set(seen) == {"ok", "died", "hang"}
    assert seen["ok"] == {"status": "result", "compiled": True}
    assert seen["died"]["status"] == "crash" and "exit status 3" in seen["died"]["error"]
    assert "segfault-ish" in seen["died"]["error"]  # the log's tail says why
    assert seen["hang"]["status"] == "timeout" and killed == ["hang"]

    seen.clear()
    assert agreement.run_children(jobs, 2, 2.0, agreement.Deadline(-1), lambda *a: None) == ["ok", "died", "hang"]
    # Cut off while running: killed, not recorded, and reported as left to do.
    slow = [_py(tmp_path, k, "import time; time.sleep(60)") for k in ("s1", "s2", "s3")]
    killed.clear()
    left = agreement.run_children(slow, 2, 60.0, agreement.Deadline(1.0),
                                  lambda *a: seen.setdefault("any", a), killed.append)
    assert sorted(left) == ["s1", "s2", "s3"] and sorted(killed) == ["s1", "s2"] and seen == {}


def test_a_child_record_can_ask_for_one_more_run(tmp_path):
    job = _py(tmp_path, "flaky", "import json; json.dump({'status': 'none'}, open('RESULT', 'w'))")
    calls = []

    def on_done(key, rec, _s):
        calls.append(rec["status"])
        return job if len(calls) == 1 else None
    agreement.run_children([job], 1, 30.0, agreement.Deadline(None), on_done)
    assert calls == ["none", "none"]


FAKE_UTILS = textwrap.dedent("""
    from dotenv import load_dotenv
    from openai import OpenAI
    from litellm import completion
    load_dotenv()
    def set_gpu_arch(archs):
        import os
        os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(archs)
""")


def test_kernelbench_imports_with_stand_ins_for_its_llm_clients(tmp_path):
    kb = tmp_path / "KB" / "src" / "kernelbench"
    kb.mkdir(parents=True)
    (kb / "__init__.py").write_text("from . import utils\n")
    (kb / "utils.py").write_text(FAKE_UTILS)
    (kb / "eval.py").write_text("from . import timing\nMARK = 'eval'\n")
    (kb / "timing.py").write_text("MARK = 'timing'\n")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(BENCH)!r})
        import kernelbench_agreement_child as child
        ev, ut, ti = child.import_kernelbench({str(tmp_path / 'KB')!r})
        print(ev.MARK, ti.MARK, ev.__file__.startswith({str(kb)!r}))
        try:
            ut.OpenAI()
        except RuntimeError as exc:
            print("raised:", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "eval timing True"
    assert out.stdout.splitlines()[1].startswith("raised: openai is a stand-in")


def test_report_alone_writes_the_table_and_says_what_is_left(tree, tmp_path, capsys):
    kb, corpus = tree
    e = _entries(tree, 3)
    out = tmp_path / "out"
    out.mkdir()
    kb_rows = [{"key": x.key, **KB_RECORDS["correct"][0]} for x in e]
    (out / agreement.KB_ROWS).write_text("".join(json.dumps(r) + "\n" for r in kb_rows))
    kf_row = {"candidate": str(e[0].candidate), **_kf("correct", "correct", 2.0)}
    (out / agreement.KFORGE_ROWS).write_text(json.dumps(kf_row) + "\n")
    rc = agreement.main(["--kernelbench", str(kb), "--manifest", str(corpus / "m.csv"), "--out", str(out),
                         "--steps", "report"])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "agreement at fp32: 1/1 candidates" in printed and "2 pending" in printed
    assert printed.rstrip().endswith("not finished: run the same command again to go on")
    assert (out / "agreement.md").read_text().count("| pending |") == 2
    assert len(list(csv.DictReader((out / "agreement.csv").open()))) == 3


def test_usage_errors_exit_2_with_the_reason(tree, tmp_path, capsys):
    kb, corpus = tree
    assert agreement.main(["--kernelbench", str(kb), "--manifest", str(tmp_path / "no.csv"), "--out",
                           str(tmp_path / "o"), "--steps", "report"]) == 2
    assert "no such manifest file" in capsys.readouterr().err
    _csv(corpus / "m.csv", [["problem", "candidate"], [str(kb / "KernelBench/level1/19_ReLU.py"), "a/relu.py"]])
    assert agreement.main(["--kernelbench", str(tmp_path), "--manifest", str(corpus / "m.csv"), "--out",
                           str(tmp_path / "o"), "--steps", "report"]) == 2
    assert "src/kernelbench/eval.py is missing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        agreement.parse_args(["--kernelbench", "x", "--manifest", "y", "--out", "z", "--steps", "build,nope"])


def test_kforge_is_asked_for_kernelbench_rules_on_cuda(tmp_path):
    args = agreement.parse_args(["--kernelbench", "x", "--manifest", "y", "--out", "z", "--jobs", "3"])
    cmd = agreement.kforge_command(args, tmp_path / "m.csv", tmp_path / "rows.jsonl")
    assert cmd[:4] == [sys.executable, "-m", "kforge.cli", "eval"]
    joined = " ".join(cmd)
    for part in ("--rules kernelbench", "--backend cuda", "--size default", "--trials 5", "--jobs 3",
                 f"--manifest {tmp_path / 'm.csv'}", f"--out {tmp_path / 'rows.jsonl'}", "--no-compile-ref"):
        assert part in joined


def test_precision_and_backend_reach_kforge_eval(tmp_path):
    args = agreement.parse_args(["--kernelbench", "x", "--manifest", "y", "--out", "z", "--precision", "bf16",
                                 "--backend", "triton"])
    joined = " ".join(agreement.kforge_command(args, tmp_path / "m.csv", tmp_path / "rows.jsonl"))
    assert "--precision bf16" in joined and "--backend triton" in joined and "--rules kernelbench" in joined
    fp32 = agreement.parse_args(["--kernelbench", "x", "--manifest", "y", "--out", "z"])
    assert "--precision" not in agreement.kforge_command(fp32, tmp_path / "m.csv", tmp_path / "r.jsonl")
    with pytest.raises(SystemExit):
        agreement.parse_args(["--kernelbench", "x", "--manifest", "y", "--out", "z", "--precision", "fp8"])


FAKE_EVAL = textwrap.dedent("""
    import json, os
    from . import timing
    def set_seed(seed):
        pass
    def get_error_name(exc):
        return type(exc).__name__
    class Result:
        compiled, correctness, runtime, runtime_stats, metadata = True, True, 0.5, {}, {"correctness_trials": "(5 / 5)"}
    def eval_kernel_against_ref(**kw):
        with open(os.environ["FAKE_KB_CALLS"], "a") as fh:
            fh.write(json.dumps({"fn": "eval", "backend": kw["backend"], "precision": str(kw["precision"])}) + "\\n")
        return Result()
""")
FAKE_TIMING = textwrap.dedent("""
    import json, os
    def measure_ref_program_time(name, src, num_trials, device, precision):
        with open(os.environ["FAKE_KB_CALLS"], "a") as fh:
            fh.write(json.dumps({"fn": "ref_time", "precision": str(precision)}) + "\\n")
        return {"mean": 1.0}
""")


def test_the_child_hands_backend_and_precision_to_kernelbench(tree, tmp_path):
    """Job file -> child -> KernelBench's eval and reference timing, with a KernelBench that records its calls."""
    kb, corpus = tree
    src = tmp_path / "KB2" / "src" / "kernelbench"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("from . import utils\n")
    (src / "utils.py").write_text(FAKE_UTILS)
    (src / "eval.py").write_text(FAKE_EVAL)
    (src / "timing.py").write_text(FAKE_TIMING)
    rows = [["problem", "candidate", "backend"], ["KernelBench/level1/19_ReLU.py", "a/relu.py", "triton"]]
    entries = table.read_manifest(_csv(corpus / "m.csv", rows), kb)
    args = agreement.parse_args(["--kernelbench", str(tmp_path / "KB2"), "--manifest", "m", "--out",
                                 str(tmp_path / "out"), "--precision", "bf16"])
    key, argv, result, _log = agreement._make_job("kernelbench", args, entries[0])
    calls = tmp_path / "calls.jsonl"
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "FAKE_KB_CALLS": str(calls)})
    assert out.returncode == 0, out.stderr
    rec = json.loads(result.read_text())
    assert (rec["backend"], rec["precision"], rec["ref_runtime"], rec["ref_timing_from"]) == \
        ("triton", "bf16", 1.0, "measure_ref_program_time")
    assert [json.loads(line) for line in calls.read_text().splitlines()] == [
        {"fn": "eval", "backend": "triton", "precision": "torch.bfloat16"},
        {"fn": "ref_time", "precision": "torch.bfloat16"}]


def test_only_cuda_candidates_are_precompiled(tree, tmp_path, capsys):
    kb, corpus = tree
    rows = [["problem", "candidate", "backend"], ["KernelBench/level1/19_ReLU.py", "a/relu.py", "triton"],
            ["KernelBench/level1/19_ReLU.py", "b/relu.py", "cuda"]]
    entries = table.read_manifest(_csv(corpus / "m.csv", rows), kb)
    args = agreement.parse_args(["--kernelbench", str(kb), "--manifest", "m", "--out", str(tmp_path / "out")])
    left = agreement.step_children("build", args, entries, agreement.Deadline(-1))  # past its deadline: starts none
    assert left == [entries[1].key]
    assert "[build] 1 to do" in capsys.readouterr().out


def test_an_out_folder_keeps_one_precision(tree, tmp_path, capsys):
    kb, corpus = tree
    _csv(corpus / "m.csv", [["problem", "candidate"], ["KernelBench/level1/19_ReLU.py", "a/relu.py"]])
    base = ["--kernelbench", str(kb), "--manifest", str(corpus / "m.csv"), "--out", str(tmp_path / "o"),
            "--steps", "report"]
    assert agreement.main(base + ["--precision", "bf16"]) == 0
    assert "agreement at bf16" in capsys.readouterr().out
    assert agreement.main(base) == 2  # fp32 into a bf16 folder
    assert "holds verdicts at precision bf16, not fp32" in capsys.readouterr().err
    assert agreement.main(base + ["--precision", "bf16"]) == 0


def test_triton_candidates_need_triton_where_kernelbench_runs(tmp_path, monkeypatch):
    (tmp_path / "src" / "kernelbench").mkdir(parents=True)
    (tmp_path / "src" / "kernelbench" / "eval.py").write_text("")
    real = importlib.util.find_spec
    monkeypatch.setattr(agreement.importlib.util, "find_spec", lambda name: None if name == "triton" else real(name))
    lacking = agreement.missing_requirements(tmp_path, ["kernelbench"], frozenset({"triton"}))
    assert any("need triton: pip install triton" in line for line in lacking)
    assert not any("triton" in line for line in agreement.missing_requirements(tmp_path, ["kernelbench"]))
    report_only = agreement.missing_requirements(tmp_path, ["report"], frozenset({"triton"}))
    assert not any("triton" in line for line in report_only)


def test_the_device_script_runs_both_samples_and_prints_both_tables(tree, tmp_path):
    """benchmarks/device_agreement.sh on a machine without a GPU: every judging step says why it cannot run,
    and the report steps still write and print a table per precision (the plumbing the device run relies on)."""
    kb, corpus = tree
    data = tmp_path / "data"
    data.mkdir()
    (data / "KernelBench").symlink_to(kb)
    relu = "KernelBench/level1/19_ReLU.py"
    for run, rows in (("corpus", [["problem", "candidate", "backend"], [relu, "r.py", "cuda"]]),
                      ("bf16", [["problem", "candidate"], [relu, "r.py"]])):
        (data / run).mkdir()
        (data / run / "r.py").write_text(CAND)
        _csv(data / run / "manifest.csv", rows)
    shims = tmp_path / "bin"  # python3 is this interpreter; no nvidia-smi
    shims.mkdir()
    (shims / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{shims}:/usr/bin:/bin", "BUDGET": "20", "JOBS": "1",
           "COPY_TO": str(tmp_path / "back"),
           "PYTHONPATH": os.pathsep.join([str(BENCH.parent), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(["bash", str(BENCH / "device_agreement.sh"), str(data), str(tmp_path / "res")],
                         cwd=BENCH.parent, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = tmp_path / "res"
    for precision in ("bf16", "fp32"):
        assert json.loads((res / precision / agreement.RUN_FILE).read_text()) == {"precision": precision}
        assert f"precision {precision}" in (res / precision / "agreement.md").read_text()
        assert f"# KernelBench's harness vs kforge under `--rules kernelbench`, precision {precision}" in out.stdout
    logs = res / "logs"
    assert "no nvidia-smi here" in (logs / "kforge_bf16.log").read_text()
    assert "no nvidia-smi here" in (logs / "kb_fp32.log").read_text()
    assert "1 candidates (1 cuda, 0 triton)" in (logs / "report_fp32.log").read_text()
    back = tmp_path / "back"  # COPY_TO: tables, rows and logs, no build folders
    assert (back / "bf16" / "agreement.md").is_file() and (back / "fp32" / "agreement.csv").is_file()
    assert (back / "logs" / "kforge_fp32.log").is_file() and not (back / "fp32" / "build").exists()

"""`kforge eval` resume: a row stands for one file judged against one problem on one backend."""

import json
import shutil

from kforge.backends import get_backend
from kforge.evaluate import read_manifest, run_eval
from kforge.verify import Verifier
from tests.helpers import CANDIDATES, fast_config


def _run(manifest, out, verifier, pool):
    before = pool.counters["run"]
    res = run_eval(read_manifest(manifest, "cpu"), verifier, {"cpu": get_backend("cpu")}, size_of=lambda b: "cpu",
                   out=out, threads=2, progress=False)
    return res, pool.counters["run"] - before


def test_one_file_against_two_problems_keeps_both_verdicts_and_a_corrected_problem_is_judged_again(tmp_path, pool):
    """The same relu.py against ReLU and SumReduction: a rerun took the ReLU verdict (correct) for both, and a
    manifest whose wrong problem was corrected kept the old verdict."""
    shutil.copy(CANDIDATES / "cpu" / "relu_torch_only.py", tmp_path / "relu.py")
    manifest, out = tmp_path / "m.csv", tmp_path / "m.jsonl"
    manifest.write_text("problem,candidate\nlevel1/1_ReLU,relu.py\nlevel1/5_SumReduction,relu.py\n")
    verifier = Verifier(fast_config(require_kernel=False, skip_timing=True, trials=1), pool=pool)

    first, _ = _run(manifest, out, verifier, pool)
    states = [(r["problem"], r["state"]) for r in first.rows]
    assert first.verified == 2 and states[0] == ("level1/1_ReLU", "correct") and states[1][1] != "correct"

    again, runs = _run(manifest, out, verifier, pool)
    assert (again.verified, again.resumed, runs) == (0, 2, 0)
    assert [(r["problem"], r["state"]) for r in again.rows] == states
    assert len(out.read_text().splitlines()) == 2
    assert [r["problem_ref"] for r in first.rows] == ["level1/1_ReLU", "level1/5_SumReduction"]

    # The second row named the wrong problem: corrected, that file is judged against the new one.
    manifest.write_text("problem,candidate\nlevel1/1_ReLU,relu.py\nlevel1/2_Softmax,relu.py\n")
    fixed, runs = _run(manifest, out, verifier, pool)
    assert (fixed.verified, fixed.resumed) == (1, 1) and runs == 1
    assert fixed.rows[1]["problem"] == "level1/2_Softmax" and fixed.rows[1]["state"] != "correct"

    # Rows written before rows recorded problem_ref are taken over where their problem is the job's.
    legacy = [{k: v for k, v in json.loads(line).items() if k != "problem_ref"} for line in out.read_text().splitlines()]
    out.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    old, runs = _run(manifest, out, verifier, pool)
    assert (old.verified, old.resumed, runs) == (0, 2, 0)
    assert [(r["problem"], r["state"]) for r in old.rows] == [(r["problem"], r["state"]) for r in fixed.rows]


def test_a_legacy_row_of_another_problem_is_not_taken_over(tmp_path, pool):
    """A row from before problem_ref, of a problem the manifest no longer names for that file, is not this job's
    verdict: the file is judged against the problem the manifest names now."""
    shutil.copy(CANDIDATES / "cpu" / "relu_torch_only.py", tmp_path / "relu.py")
    manifest, out = tmp_path / "m.csv", tmp_path / "m.jsonl"
    manifest.write_text("problem,candidate\nlevel1/5_SumReduction,relu.py\n")
    verifier = Verifier(fast_config(require_kernel=False, skip_timing=True, trials=1), pool=pool)
    _run(manifest, out, verifier, pool)
    row = {k: v for k, v in json.loads(out.read_text()).items() if k != "problem_ref"}
    row.update(state="correct", correct=True)  # a verdict to take over, were the problem not compared
    out.write_text(json.dumps(row) + "\n")
    manifest.write_text("problem,candidate\nlevel1/1_ReLU,relu.py\n")
    res, runs = _run(manifest, out, verifier, pool)
    assert (res.verified, res.resumed) == (1, 0) and res.rows[0]["problem"] == "level1/1_ReLU"
    # The other problem's legacy row is a row of another judgement: it stays, as rows of files no longer listed do.
    assert sorted(json.loads(line)["problem"] for line in out.read_text().splitlines()) == \
        ["level1/1_ReLU", "level1/5_SumReduction"]

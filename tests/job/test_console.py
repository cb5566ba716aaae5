"""What the console says about a job: the iteration lines and the closing summary, interrupted or not."""

import io

from kforge.job.console import print_summary, status_line
from kforge.llm import ModelConfig, make_model
from kforge.llm.base import CallContext
from kforge.loop import IterationRecord, ProblemResult
from kforge.metrics import summary
from kforge.problems import load_builtin, resolve_problem
from kforge.verify.verdict import State, TimingStats, Verdict

RELU, SOFTMAX = load_builtin(levels=[1], ids=[1, 2], size="cpu")


def timing(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.0, n=5, min_ms=ms)


def result(problem, states: list[str], cost: float | None = 0.0, stopped: bool = False) -> ProblemResult:
    """A problem's loop as it ended: one record per state; a correct one becomes the best kernel (1.5x eager)."""
    r = ProblemResult(problem, stopped=stopped)
    for i, state in enumerate(states):
        ok = state == "correct"
        r.records.append(IterationRecord(iteration=i, phase="single_shot" if i == 0 else "optimise", state=state,
                                         correct=ok, message="", speedup_eager=1.5 if ok else None,
                                         prompt_tokens=100, completion_tokens=20, cost_usd=cost))
        if ok:
            r.offer("code", Verdict(State.CORRECT, "ok", runtime=timing(2.0), ref=timing(3.0)), i, "eager")
    return r


def stats_of(results: list[ProblemResult]) -> dict:
    return summary([(r.correct, r.speedup_eager) for r in results])


def printed(results, cut_off=(), model_kind=None, skipped=()) -> str:
    buf = io.StringIO()
    print_summary(results, stats_of(results), buf, cut_off=list(cut_off), model_kind=model_kind, skipped=list(skipped))
    return buf.getvalue()


def test_a_double_ctrl_c_summary_counts_what_finished_and_shows_what_was_cut_off():
    """Every problem cut off, two with correct kernels logged: not "correct 0%", not "cost unknown"."""
    cut = [result(RELU, ["compilation_failure", "correct"], stopped=True), result(SOFTMAX, ["correct"], stopped=True)]
    out = printed([], cut, model_kind="oracle")
    assert "correct 0%" not in out and "no correct kernels" not in out and "cost unknown" not in out
    assert "no problem finished in this job; 2 cut off (2 with a correct kernel so far) are not counted" in out
    assert "level1/1_ReLU" in out and "correct (cut off)" in out and "1.50x" in out
    assert "tokens 300 in / 60 out · cost $0 (the oracle: hand-written solutions, not an LLM)" in out


def test_a_finished_job_says_over_how_many_problems_its_rates_are():
    out = printed([result(RELU, ["correct"]), result(SOFTMAX, ["numerical_mismatch"])], model_kind="scripted")
    assert "correct 50% (1 of 2 finished) · fast_1 50% · fast_1.5 0% · geomean speedup 1.50x" in out
    assert "cost $0 (a scripted model, not an LLM)" in out
    # Half finished, half cut off: the rates are the finished half's, and the line says the rest waits.
    out = printed([result(RELU, ["correct"])], [result(SOFTMAX, ["numerical_mismatch"], stopped=True)])
    assert "correct 100% (1 of 1 finished, of 2 problems)" in out and "1 cut off (0 with a correct kernel so far)" in out
    assert "numerical_mismatch (cut off)" in out


def test_a_skipped_problem_is_counted_visibly_not_hidden_from_the_rate():
    """One of two problems fails on its own (problem_error): not "correct 100% (1 of 1 finished)"."""
    broken = ProblemResult(SOFTMAX, problem_error="ValueError: the reference fails on its own")
    out = printed([result(RELU, ["correct"])], skipped=[broken])
    assert "correct 100% (1 of 1 finished, of 2 problems)" in out
    assert "1 skipped (the problem itself fails: problem_error) is not counted" in out
    assert "level1/2_Softmax" in out and "problem_error (skipped)" in out


def test_cost_of_a_litellm_model():
    assert "cost unknown (litellm has no price for this model)" in printed([result(RELU, ["correct"], cost=None)])
    assert "cost $0.0300" in printed([result(RELU, ["correct", "correct"], cost=0.015)])
    out = printed([result(RELU, ["correct"], cost=0.01), result(SOFTMAX, ["correct"], cost=None)])
    assert "cost $0.0100 (1 iteration(s) without a price)" in out
    assert "no model calls" in printed([])


def test_the_oracle_says_why_it_has_no_kernel_on_the_iteration_line(tmp_path):
    """A problem of the user's own: the oracle has no solution, and the line says so, not a bare state."""
    own = tmp_path / "scaled_tanh.py"
    own.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                   "        return 2.0 * torch.tanh(x)\n\ndef get_inputs():\n    return [torch.randn(64, 256)]\n\n"
                   "def get_init_inputs():\n    return []\n")
    problem = resolve_problem(str(own), size="cpu")
    oracle = make_model(ModelConfig(name="oracle", kind="oracle"))
    reply = oracle.complete([], CallContext(problem=problem, backend="cpu", problem_key=problem.key))
    assert reply.note
    record = IterationRecord(iteration=0, phase="single_shot", state="generation_failure", correct=False,
                             message=reply.note)
    line = status_line(problem, record, budget=1)
    assert "generation_failure" in line and "has no solution for" in line and "on the cpu backend" in line



def test_an_iteration_line_shows_a_speedup_only_for_a_correct_kernel():
    """A kernel timed at the main shape that then failed a shape variant printed "runtime_error 1.12x eager"."""
    failed = IterationRecord(iteration=1, phase="fix", state="runtime_error", correct=False,
                             message="shape variant 1: CUDA error", speedup_eager=1.12, speedup_compile=0.9)
    line = status_line(RELU, failed, budget=3)
    assert "runtime_error" in line and "x eager" not in line and "x compile" not in line
    ok = IterationRecord(iteration=2, phase="optimise", state="correct", correct=True, message="",
                         speedup_eager=1.12, speedup_compile=0.9)
    assert "1.12x eager, 0.90x compile" in status_line(RELU, ok, budget=3)


def test_a_speedup_whose_interval_spans_one_is_flagged():
    """1.06x over eager with a timing this noisy is not known to be faster: the row and the line say so."""
    noisy = ProblemResult(RELU)
    run, ref = (TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.2 * ms, n=20, min_ms=ms, rel_err=0.05)
                for ms in (2.0, 2.12))
    noisy.offer("code", Verdict(State.CORRECT, "ok", runtime=run, ref=ref), 0, "eager")
    out = printed([noisy, result(SOFTMAX, ["correct"])])
    assert "1.06x ~" in out and "1.50x  " in out and "fast_1 100% (1 within noise ~)" in out
    assert "~ the speedup's interval spans 1.0: not known to be faster or slower" in out

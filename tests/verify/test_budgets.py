"""kforge's own phases keep within budgets of their own: what they measured decides, never a timeout charged to the
candidate; a candidate whose own call hangs is still its timeout."""

from dataclasses import replace

from kforge.problems import resolve_problem
from kforge.sandbox.protocol import Progress, Reply
from kforge.verify import TimingConfig, Verifier
from kforge.verify.protocol import RunProgress, RunResult
from kforge.verify.unfinished import established
from kforge.verify.verdict import TimingStats
from tests.helpers import candidate, fast_config

RELU = resolve_problem("level1/1_ReLU", size="cpu", overrides={"BATCH": 8, "DIM": 4096})
OK = candidate("cpu", "relu_ok.py")


def slowed(seconds: float, from_call: int = 0) -> str:
    """relu_ok.py whose forward sleeps ``seconds`` from its ``from_call``-th call on."""
    return "import time\n" + OK.replace("""    def forward(self, x):
        return ext.relu_fwd(x)""", f"""    calls = 0

    def forward(self, x):
        ModelNew.calls += 1
        if ModelNew.calls > {from_call}:
            time.sleep({seconds})
        return ext.relu_fwd(x)""")


def test_timing_stops_at_its_limit_and_reports_its_spread(pool):
    timing = TimingConfig(warmup=1, min_trials=500, max_trials=1000, budget_s=100, input_sets=1, recheck_every=1000,
                          limit_s=2.0)
    v = Verifier(fast_config(timing=timing), pool=pool).verify(RELU, slowed(0.02), "cpu")
    assert v.correct and v.runtime is not None, v.summary()
    note = next(n for n in v.evidence.notes if n.startswith("timing:"))
    assert "limit reached" in note and "relative error of the median" in note, note
    assert v.phases["timing"] < 6, v.phases


def test_an_attribution_out_of_budget_is_a_note_and_the_verdict_stands(pool):
    cfg = fast_config(trials=3, skip_timing=True, attribution_budget_s=0.4)
    v = Verifier(cfg, pool=pool).verify(RELU, slowed(0.3), "cpu")
    assert v.state.value == "correct" and v.states["kernelbench"] == "correct", v.summary()
    assert any("attribution's budget" in n for n in v.evidence.notes), v.evidence.notes
    assert v.phases["attribution"] < 3, v.phases


def test_a_candidate_hanging_in_timing_is_its_own_timeout(pool):
    """Its correctness trials' calls returned at once; in timing one never returns: the candidate hangs."""
    timing = TimingConfig(warmup=1, min_trials=3, max_trials=6, budget_s=1, input_sets=1, limit_s=7.0)
    v = Verifier(fast_config(trials=3, timing=timing), pool=pool).verify(RELU, slowed(1000, from_call=1), "cpu")
    assert v.state.value == "timeout" and "had run" in v.message, v.summary()


DEVICE = "cpu (test)"


def stopped(progress: Progress | None, phase: str = "timing") -> Reply:
    return Reply(slot="cpu", timed_out=True, phase=phase, progress=progress)


def test_a_run_stopped_in_kforges_measuring_is_judged_from_what_it_established():
    cfg = fast_config()
    stats = TimingStats.from_samples([1.0, 1.1, 0.9, 1.0])
    run = RunProgress(trials=3, notes=["n"], runtime=stats, ref=stats)
    facts = established(stopped(Progress(milestones={"run": run.to_wire()}), "attribution"), cfg, [], [], DEVICE)
    assert facts.facets.outcome == "correct" and facts.runtime == stats and facts.trials == 3
    assert "whose code did the work was not measured" in facts.evidence.notes[-1], facts.evidence.notes
    untimed = replace(run, runtime=None, ref=None).to_wire()
    facts = established(stopped(Progress(milestones={"run": untimed})), cfg, [], [], DEVICE)
    assert "its timings and whose code" in facts.evidence.notes[-1]
    # Static findings about the work speak where nothing measured it.
    soft = [{"rule": "no_kernel", "message": "no kernel found", "line": None, "severity": "warn"}]
    facts = established(stopped(Progress(milestones={"run": untimed})), cfg, soft, [], DEVICE)
    assert facts.facets.work == "none" and facts.facets.work_rule == "no_kernel"


def test_a_run_stopped_in_candidate_code_or_before_passing_is_the_candidates_timeout():
    cfg = fast_config()
    run = RunProgress(trials=3).to_wire()
    assert established(stopped(Progress(in_candidate=True, milestones={"run": run})), cfg, [], [], DEVICE) is None
    assert established(stopped(Progress(milestones={})), cfg, [], [], DEVICE) is None
    assert established(stopped(None), cfg, [], [], DEVICE) is None
    not_stopped = Reply(slot="cpu", progress=Progress(milestones={"run": run}), result=RunResult(state="correct"))
    assert established(not_stopped, cfg, [], [], DEVICE) is None

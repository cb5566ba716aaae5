"""The problem loop on its own, with a scripted model and an in-process verifier (`tests.loop.fakes`) that
judges the test suite's CPU candidates as the real one does: what observers hear and when, resuming from a
LoopState, a stop, a broken problem, and a kforge error or an interrupt inside the loop."""

import pytest

from kforge.agents import GenerationAgent
from kforge.backends import get_backend
from kforge.llm import ModelConfig, make_model
from kforge.loop import LoopConfig, LoopObserver, LoopState, ProblemLoop, ProblemResult
from kforge.problems import load_builtin
from kforge.verify import ProblemFails
from tests.helpers import candidate
from tests.loop.fakes import FakeVerifier, correct, mismatch


def fenced(name: str) -> str:
    return f"Here is the program.\n```python\n{candidate('cpu', name)}```\n"


#: What the real verifier says of these candidates (tests/verify/test_cpu_states.py and tests/job/test_pipeline.py
#: check that it does).
VERDICTS = {"relu_ok.py": lambda: correct(0.5), "relu_wrong_math.py": lambda: mismatch(2.0)}


def judge(source: str):
    (name,) = [n for n in VERDICTS if candidate("cpu", n).strip() == source.strip()]
    return VERDICTS[name]()


class Recorder(LoopObserver):
    """Writes down every event it is told, in order."""

    def __init__(self):
        self.events = []

    def problem_started(self, problem, reference, resume):
        self.events.append(("started", problem.key, resume))

    def iteration_done(self, problem, step):
        assert step.record.state == step.verdict.state.value and step.attempt.phase == step.record.phase
        self.events.append(("iteration", step.record.iteration, step.record.state))

    def problem_ended(self, problem, result):
        self.events.append(("ended", problem.key, result.stopped, result.error))

    def problem_abandoned(self, problem):
        self.events.append(("abandoned", problem.key))


@pytest.fixture
def relu():
    return load_builtin(names=["level1/1_ReLU"], size="cpu", overrides={"BATCH": 8, "DIM": 4096})[0]


def make_loop(*replies, iterations=2, observers=(), verifier=None):
    llm = make_model(ModelConfig(name="scripted", kind="scripted", replies=list(replies)))
    agent = GenerationAgent(llm, get_backend("cpu"), None, "a cpu")
    return ProblemLoop(agent, verifier or FakeVerifier(judge), LoopConfig(iterations=iterations, concurrency=1),
                       observers=observers), llm


def test_observers_hear_start_each_iteration_and_end_in_order(relu):
    first, second = Recorder(), Recorder()
    loop, _ = make_loop(fenced("relu_wrong_math.py"), fenced("relu_ok.py"), observers=[first, second])
    result = loop.run(relu)
    assert first.events == second.events == [
        ("started", "level1/1_ReLU", None), ("iteration", 0, "numerical_mismatch"), ("iteration", 1, "correct"),
        ("ended", "level1/1_ReLU", False, None)]
    assert result.correct and result.best_iteration == 1


def test_a_resumed_state_continues_where_the_run_left_off(relu):
    state = LoopState(ProblemResult(relu))
    loop, _ = make_loop(fenced("relu_wrong_math.py"), iterations=1)
    loop.run(relu, resume=state)  # the state a run leaves is what a rerun continues from
    assert state.next_iteration == 1 and state.last_verdict.state.value == "numerical_mismatch"
    recorder = Recorder()
    loop, llm = make_loop(fenced("relu_ok.py"), iterations=2, observers=[recorder])
    result = loop.run(relu, resume=state)
    assert recorder.events[0] == ("started", "level1/1_ReLU", state)
    assert [e[1:] for e in recorder.events[1:-1]] == [(1, "correct")]  # iteration 0 is not run again
    assert [r.phase for r in result.records] == ["single_shot", "fix"] and llm.calls == 1
    assert "max_abs_err" in llm.prompts[0][1]["content"]  # the fix prompt carried the earlier mismatch
    assert result is state.result and result.correct


def test_a_kforge_error_ends_the_problem_and_an_interrupt_abandons_it(relu, monkeypatch):
    recorder = Recorder()
    loop, _ = make_loop(fenced("relu_ok.py"), observers=[recorder])

    def broken(*args, **kwargs):
        raise RuntimeError("boom inside kforge")
    monkeypatch.setattr(loop.agent, "single_shot", broken)
    result = loop.run(relu)
    assert "boom inside kforge" in result.error and not result.stopped
    assert [e[0] for e in recorder.events] == ["started", "ended"] and recorder.events[-1][3] == result.error

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(loop.agent, "single_shot", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loop.run(relu)
    assert [e[0] for e in recorder.events[2:]] == ["started", "abandoned"]


def test_a_stop_during_the_model_call_records_nothing_and_cuts_the_problem_off(relu):
    """The stop lands while the model writes iteration 1: that kernel is not verified nor recorded (a rerun
    replays the call), the result is stopped, and a rerun's state continues at iteration 1."""
    recorder = Recorder()
    loop, llm = make_loop(fenced("relu_wrong_math.py"), fenced("relu_ok.py"), iterations=3, observers=[recorder])
    fix = loop.agent.fix

    def fix_then_stop(*args, **kwargs):
        attempt = fix(*args, **kwargs)
        loop.stop.set()  # a Ctrl-C during the model call
        return attempt
    loop.agent.fix = fix_then_stop
    state = LoopState(ProblemResult(relu))
    result = loop.run(relu, resume=state)
    assert result.stopped and not result.error and llm.calls == 2 and loop.verifier.pool.counters["run"] == 1
    assert [r.iteration for r in result.records] == [0] and state.next_iteration == 1
    assert recorder.events[1:] == [("iteration", 0, "numerical_mismatch"), ("ended", "level1/1_ReLU", True, None)]
    assert loop.run(relu).stopped and loop.verifier.pool.counters["run"] == 1  # set before it starts: nothing runs


def test_a_problem_the_verifier_finds_broken_is_skipped_not_failed(relu):
    class Skips(Recorder):
        def problem_skipped(self, problem, result):
            self.events.append(("skipped", problem.key))

    def broken(source):
        raise ProblemFails("the reference raised", "Traceback: ZeroDivisionError")
    recorder = Skips()
    loop, _ = make_loop(fenced("relu_ok.py"), observers=[recorder], verifier=FakeVerifier(broken))
    result = loop.run(relu)
    assert "ZeroDivisionError" in result.problem_error and not result.error and result.outcome == "problem_error"
    assert [e[0] for e in recorder.events] == ["started", "skipped"]


def test_single_shot_is_one_iteration_whatever_iterations_says():
    assert LoopConfig(mode="single_shot", iterations=4).budget == 1 and LoopConfig(iterations=4).budget == 4


def test_a_job_tells_its_events_around_its_problems(relu):
    """run_problems tells the job's start and end beside each problem's events; its end carries the figures."""
    from kforge.loop import run_problems

    class JobRecorder(Recorder):
        def job_started(self, start):
            self.events.append(("job started", [p.key for p in start.todo], len(start.done)))

        def problem_collected(self, result):
            self.events.append(("collected", result.problem.key))

        def job_ended(self, end):
            self.events.append(("job ended", [r.problem.key for r in end.results], end.verifications,
                                end.interrupted, end.stats["fast_0"]))

    recorder = JobRecorder()
    loop, _ = make_loop(fenced("relu_ok.py"), iterations=1, observers=[recorder])
    end = run_problems([relu], loop)
    assert recorder.events == [
        ("job started", ["level1/1_ReLU"], 0), ("started", "level1/1_ReLU", None), ("iteration", 0, "correct"),
        ("ended", "level1/1_ReLU", False, None), ("collected", "level1/1_ReLU"),
        ("job ended", ["level1/1_ReLU"], 1, False, 1.0)]
    assert end.results[0].correct and end.stats["n"] == 1


@pytest.mark.parametrize("answer, why", [
    (None, "cannot reach http://127.0.0.1:9/v1"),
    ({"status": 401, "message": "Incorrect API key provided"}, "refused model local (hosted_vllm/m): "
                                                               "AuthenticationError 401: Incorrect API key provided"),
    ({"status": 500}, "kept failing for model local (hosted_vllm/m) in 2 attempt(s): InternalServerError 500"),
    ({"sleep": 3, "content": "late"}, "did not answer model local (hosted_vllm/m) within model.timeout_s=0.5 s"),
], ids=["closed_port", "401", "500", "hang"])
def test_a_model_that_cannot_answer_stops_the_job_and_cuts_its_problems_off(relu, answer, why):
    """The outage was each problem's `generation_failure`, the job FINISHED, and a rerun found nothing to do. Real
    litellm calls to a closed port, and to a local server refusing the key, failing with 500 after the retries, or
    answering after model.timeout_s: the job stops on its own, its problem cut off for a rerun to continue."""
    from kforge.loop import Interrupted, run_problems
    from tests.llm.stub_server import StubServer
    softmax = load_builtin(names=["level1/2_Softmax"], size="cpu", overrides={"BATCH": 8, "DIM": 4096})[0]
    with StubServer([answer or "unused"]) as server:
        api_base = server.api_base if answer else "http://127.0.0.1:9/v1"
        llm = make_model(ModelConfig(name="local", model="hosted_vllm/m", api_base=api_base, retries=1,
                                     backoff_s=0.01, cache=False,
                                     # short only where the server hangs: a busy machine answers late
                                     timeout_s=0.5 if answer and "sleep" in answer else 20))
        recorder = Recorder()
        loop = ProblemLoop(GenerationAgent(llm, get_backend("cpu"), None, "a cpu"), FakeVerifier(judge),
                           LoopConfig(iterations=1, concurrency=1), observers=[recorder])
        with pytest.raises(Interrupted) as stopped:
            run_problems([relu, softmax], loop)
    end = stopped.value.end
    assert end.interrupted and why in end.why and "\n" not in end.why, end.why
    assert [(r.problem.key, r.stopped, r.error) for r in end.ended] == [("level1/1_ReLU", True, None)]
    assert not end.results and ("ended", "level1/1_ReLU", True, None) in recorder.events  # cut off, not failed

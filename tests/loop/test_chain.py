"""The problem loop on its own, on CPU with a scripted model: what observers hear and when, resuming
from a LoopState, and a kforge error or an interrupt inside the loop."""

import pytest

from kforge.agents import GenerationAgent
from kforge.backends import get_backend
from kforge.llm import ModelConfig, make_model
from kforge.loop import LoopConfig, LoopObserver, LoopState, ProblemLoop, ProblemResult
from kforge.problems import load_builtin
from kforge.verify import Verifier
from tests.helpers import candidate, fast_config


def fenced(name: str) -> str:
    return f"Here is the program.\n```python\n{candidate('cpu', name)}```\n"


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


def make_loop(pool, *replies, iterations=2, observers=()):
    llm = make_model(ModelConfig(name="scripted", kind="scripted", replies=list(replies)))
    agent = GenerationAgent(llm, get_backend("cpu"), None, "a cpu")
    return ProblemLoop(agent, Verifier(fast_config(), pool=pool), LoopConfig(iterations=iterations, concurrency=1),
                       observers=observers), llm


def test_observers_hear_start_each_iteration_and_end_in_order(pool, relu):
    first, second = Recorder(), Recorder()
    loop, _ = make_loop(pool, fenced("relu_wrong_math.py"), fenced("relu_ok.py"), observers=[first, second])
    result = loop.run(relu)
    assert first.events == second.events == [
        ("started", "level1/1_ReLU", None), ("iteration", 0, "numerical_mismatch"), ("iteration", 1, "correct"),
        ("ended", "level1/1_ReLU", False, None)]
    assert result.correct and result.best_iteration == 1


def test_a_resumed_state_continues_where_the_run_left_off(pool, relu):
    state = LoopState(ProblemResult(relu))
    loop, _ = make_loop(pool, fenced("relu_wrong_math.py"), iterations=1)
    loop.run(relu, resume=state)  # the state a run leaves is what a rerun continues from
    assert state.next_iteration == 1 and state.last_verdict.state.value == "numerical_mismatch"
    recorder = Recorder()
    loop, llm = make_loop(pool, fenced("relu_ok.py"), iterations=2, observers=[recorder])
    result = loop.run(relu, resume=state)
    assert recorder.events[0] == ("started", "level1/1_ReLU", state)
    assert [e[1:] for e in recorder.events[1:-1]] == [(1, "correct")]  # iteration 0 is not run again
    assert [r.phase for r in result.records] == ["single_shot", "fix"] and llm.calls == 1
    assert "max_abs_err" in llm.prompts[0][1]["content"]  # the fix prompt carried the earlier mismatch
    assert result is state.result and result.correct


def test_a_kforge_error_ends_the_problem_and_an_interrupt_abandons_it(pool, relu, monkeypatch):
    recorder = Recorder()
    loop, _ = make_loop(pool, fenced("relu_ok.py"), observers=[recorder])

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


def test_single_shot_is_one_iteration_whatever_iterations_says():
    assert LoopConfig(mode="single_shot", iterations=4).budget == 1 and LoopConfig(iterations=4).budget == 4

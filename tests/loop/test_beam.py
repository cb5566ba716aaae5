"""Beam search (``loop=beam``, kforge/loop/beam.py) on CPU with a model whose reply depends on its prompt: the
search keeps the best branch, beats the iterative chain at the same model-call budget, respects the call
and dollar budgets, keeps diverse survivors, resumes a tree cut off, and leaves the tree in MLflow.

The search's own tests judge kernels in process (`judge`, `tests.loop.fakes`); the pipeline's build, run and
check every kernel in the worker pool, timed by what the kernel does (`steady_clock`)."""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from kforge.agents import GenerationAgent
from kforge.agents.analysis import GENERIC_DIRECTIONS, parse_recommendations
from kforge.backends import get_backend
from kforge.job.pipeline import run
from kforge.llm import LLMResponse, ModelConfig
from kforge.loop import GenericAdvisor, LoopConfig, LoopObserver, LoopState, ProblemLoop, ProblemResult
from kforge.loop.beam import Node, select_survivors
from kforge.problems import load_builtin
from kforge.profile.digest import Digest
from kforge.profile.rules import classify, findings
from kforge.verify import Verifier
from tests.helpers import candidate, config
from tests.loop.fakes import FakeVerifier, correct, mismatch


def kernel(repeat: int, wrong: bool = False) -> str:
    """The test suite's C++ ReLU (its build is cached: the source of the extension is the same) called
    ``repeat`` times per forward: a smaller REPEAT is faster. ``wrong`` returns the input unchanged (a
    numerical mismatch), keeping the REPEAT a fix should restore."""
    ok = candidate("cpu", "relu_ok.py")
    head = ok[:ok.index("class ModelNew")]
    return (f"```python\n{head}REPEAT = {repeat}\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
            f"        y = ext.relu_fwd(x)\n        for _ in range(REPEAT - 1):\n            y = ext.relu_fwd(x)\n"
            f"        return {'x' if wrong else 'y'}\n```\n")


def direction_action(category: str) -> str:
    return dict(GENERIC_DIRECTIONS)[category]


class KeyedModel:
    """Not an LLM: replies from the prompt. The first kernel repeats its pass 200 times; an optimisation
    derives its REPEAT from the parent's, by the recommendation in the prompt: the generic request shaves 10
    (a local optimum's marginal gains), moving fewer bytes divides by 4, cutting launch overhead writes a
    wrong kernel that its fix turns into REPEAT/2. Every call costs ``cost_usd``."""

    def __init__(self, cost_usd: float = 0.0):
        self.config = ModelConfig(name="keyed", kind="scripted", replies=["(replies from the prompt)"])
        self.cost_usd, self.calls, self.kernels = cost_usd, 0, []
        """Calls made, and every kernel written (for the chain's path)."""
        self._lock = threading.Lock()

    def check(self) -> None:
        """Always available."""

    def complete(self, messages, context=None) -> LLMResponse:
        prompt = messages[-1]["content"]
        with self._lock:
            self.calls += 1
        n = int(m.group(1)) if (m := re.search(r"REPEAT = (\d+)", prompt)) else 200
        if context.phase == "fix":
            text = kernel(n)
        elif context.phase == "single_shot":
            text = kernel(200)
        elif direction_action("memory_traffic") in prompt:
            text = kernel(max(1, n // 4))
        elif direction_action("launch_overhead") in prompt:
            text = kernel(max(1, n // 2), wrong=True)
        else:
            text = kernel(max(1, n - 10))
        with self._lock:
            self.kernels.append(text)
        return LLMResponse(text=text, model="keyed", cost_usd=self.cost_usd)


@pytest.fixture
def relu():
    return load_builtin(names=["level1/1_ReLU"], size="cpu", overrides={"BATCH": 8, "DIM": 4096})[0]


def repeat_of(code: str) -> int:
    return int(re.search(r"REPEAT = (\d+)", code).group(1))


@pytest.fixture(autouse=True)
def steady_clock(monkeypatch):
    """Speed as the kernel's work says (REPEAT passes: REPEAT x 10 us against a 1 ms reference), not as a
    busy machine measures it: which node survives and which kernel is best then never depends on the
    load. Correctness is still the real verifier's where a test uses it (the pipeline's): it builds, runs
    and checks every kernel."""
    real = Verifier.verify

    def verify(self, problem, candidate, backend, *args, **kwargs):
        verdict = real(self, problem, candidate, backend, *args, **kwargs)
        if verdict.correct and verdict.runtime and verdict.ref:
            verdict.runtime = replace(verdict.runtime, median_ms=repeat_of(verdict_source(candidate)) * 0.01)
            verdict.ref = replace(verdict.ref, median_ms=1.0)
        return verdict

    monkeypatch.setattr(Verifier, "verify", verify)


def verdict_source(candidate) -> str:
    return candidate if isinstance(candidate, str) else candidate.source


def judge(source: str):
    """What the real verifier says of a `kernel` (the pipeline tests below have it say so), timed as
    `steady_clock` times it: a wrong kernel is a numerical mismatch; a right one takes REPEAT x 10 us."""
    return mismatch() if "return x\n" in source else correct(repeat_of(source) * 0.01)


def loop_of(model, **loop):
    """A problem loop whose strategy ``loop["mode"]`` names (the chain, or beam search), judging in process
    with two device slots (beam search verifies a wave at once)."""
    agent = GenerationAgent(model, get_backend("cpu"), None, "a cpu")
    return ProblemLoop(agent, FakeVerifier(judge, slots=2), LoopConfig(concurrency=1, **loop),
                       advisor=GenericAdvisor())


def test_beam_finds_a_faster_kernel_than_the_chain_at_the_same_call_budget(relu):
    chain_model, beam_model = KeyedModel(), KeyedModel()
    chain = loop_of(chain_model, mode="iterative", iterations=7).run(relu)
    beam = loop_of(beam_model, mode="beam", max_calls=7, width=3, beam=2, depth=3).run(relu)
    assert chain_model.calls == beam_model.calls == 7
    # The chain follows the generic request: 200 -> 190 -> ... -> 140. The tree takes the /4 branch and
    # the fixed /2 branch, then refines both: 200 -> 50 -> 40 is its best.
    assert [repeat_of(r) for r in chain_model.kernels] == [200, 190, 180, 170, 160, 150, 140]
    assert repeat_of(chain.best_code) == 140 and repeat_of(beam.best_code) == 40 and beam.correct
    assert beam.best_verdict.runtime.median_ms < chain.best_verdict.runtime.median_ms
    tree = {r.iteration: (r.parent, r.depth, r.direction, r.phase, r.state) for r in beam.records}
    assert {k: v for k, v in tree.items() if k <= 4} == {
        0: (None, 0, "root", "single_shot", "correct"),
        1: (0, 1, "generic", "optimise", "correct"),
        2: (0, 1, "memory_traffic", "optimise", "correct"),
        3: (0, 1, "launch_overhead", "optimise", "numerical_mismatch"),
        4: (3, 1, "launch_overhead", "fix", "correct"),
    }
    # Round 2: two calls are left, one child for each survivor, with its first direction. The survivors
    # are round 1's two fastest correct nodes of different directions: the /4 branch (node 2, REPEAT 50),
    # then the fixed /2 branch (node 4, REPEAT 100) before the generic 190.
    assert {k: v for k, v in tree.items() if k > 4} == {5: (2, 2, "generic", "optimise", "correct"),
                                                         6: (4, 2, "generic", "optimise", "correct")}
    assert beam.best_iteration == 5 and [r.iteration for r in beam.records if r.is_best][-1] == 5
    assert all(r.recommendation for r in beam.records if r.phase == "optimise")


def test_the_call_budget_is_never_exceeded_and_the_dollar_limit_stops_new_rounds(relu):
    model = KeyedModel()
    result = loop_of(model, mode="beam", max_calls=3, width=3, beam=2, depth=5).run(relu)
    # Round 1 would make three children; the budget leaves two.
    assert model.calls == len(result.records) == 3 and result.correct
    assert [r.direction for r in result.records] == ["root", "generic", "memory_traffic"]

    model = KeyedModel(cost_usd=0.01)
    result = loop_of(model, mode="beam", iterations=50, max_cost_usd=0.025, width=3, beam=2,
                     depth=5).run(relu)
    # $0.01 spent before round 1, so its three children start; then $0.04 >= $0.025: no fix, no round 2.
    assert model.calls == len(result.records) == 4
    assert [r.phase for r in result.records] == ["single_shot", "optimise", "optimise", "optimise"]
    assert sum(r.cost_usd for r in result.records) == pytest.approx(0.04)


def node(iteration: int, direction: str) -> Node:
    return Node(iteration, parent=0, depth=1, direction=direction)


def test_survivors_are_the_fastest_of_distinct_directions_while_one_is_left():
    a, b, c, d, e = node(1, "x"), node(2, "x"), node(3, "y"), node(4, "z"), node(5, "y")
    speed = {1: 5.0, 2: 4.0, 3: 3.0, 4: None, 5: 3.0}.get  # d is not correct
    def pick(nodes, beam):
        return [n.iteration for n in select_survivors(nodes, beam, lambda n: speed(n.iteration))]
    assert pick([a, b, c, d, e], 2) == [1, 3]  # b is faster than c, but shares a's direction
    assert pick([a, b, c, d, e], 3) == [1, 3, 2]  # no third correct direction: the fastest left
    assert pick([e, c, b, a], 2) == [1, 3]  # equal speeds: the earlier node
    assert pick([d], 2) == [] and pick([a, b], 1) == [1]


def test_advisors_give_distinct_directions():
    recs = GenericAdvisor().recommend_many(None, "", None, 4)
    assert [r.category for r in recs] == ["generic", "memory_traffic", "launch_overhead", "parallelism"]
    digest = Digest(problem="p", device="cuda:H200", tool="ncu", time_ms=0.01, bound="latency", launches=3, kernels=[])
    found = findings(digest, 3)
    assert [f.rule for f in found] == ["unfused_launches", "tiny_latency_bound"] and found[0] == classify(digest)
    reply = ("BOTTLENECK: Memory bandwidth\nEVIDENCE: 40%\nACTION: vectorise loads\n\n"
             "BOTTLENECK: memory bandwidth!\nEVIDENCE: again\nACTION: the same class twice\n"
             "BOTTLENECK: launch overhead\nEVIDENCE: 3 launches\nACTION: fuse\n")
    assert [(r.category, r.action) for r in parse_recommendations(reply, "m")] == [
        ("memory_bandwidth", "vectorise loads"), ("launch_overhead", "fuse")]


def test_loop_beam_through_the_pipeline_leaves_the_tree_in_mlflow(tmp_path: Path, pool):
    import mlflow

    model = KeyedModel()
    result = run(config(tmp_path, "loop=beam", "loop.max_calls=5", "loop.width=3", "loop.beam=2"), llm=model,
                 pool=pool)
    (res,) = result.results
    assert model.calls == 5 and len(res.records) == 5 and repeat_of(res.best_code) == 50
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run_,) = client.search_runs([client.get_experiment_by_name("kforge").experiment_id],
                                 "tags.`kforge.kind` = 'problem'")
    assert run_.data.tags["loop_mode"] == "beam"
    parents = {m.step: m.value for m in client.get_metric_history(run_.info.run_id, "parent")}
    depths = {m.step: m.value for m in client.get_metric_history(run_.info.run_id, "depth")}
    assert parents == {1: 0, 2: 0, 3: 0, 4: 3} and depths == {0: 0, 1: 1, 2: 1, 3: 1, 4: 1}
    assert run_.data.tags["direction.2"] == "memory_traffic" and run_.data.tags["direction.0"] == "root"
    assert "tree.png" in {a.path for a in client.list_artifacts(run_.info.run_id)}  # the tree, drawn


class Steps(LoopObserver):
    """Keeps every step it is told of (what `kforge.tracking.resume.restore` reads back from MLflow)."""

    def __init__(self):
        self.steps = []

    def iteration_done(self, problem, step):
        self.steps.append(step)


def test_a_tree_cut_off_mid_search_resumes_where_it_stopped(relu):
    """Cut off after round 1 (five nodes recorded), the same search resumed from what was recorded runs no
    recorded node again, tells the observers only of new ones and ends with the budget's seven nodes."""

    class StopsAt(KeyedModel):
        def __init__(self, call: int):
            super().__init__()
            self.stop_at, self.loop = call, None

        def complete(self, messages, context=None):
            with self._lock:
                if self.calls + 1 == self.stop_at:  # a Ctrl-C just as round 2's first call starts
                    self.loop.stop.set()
            return super().complete(messages, context)

    settings = dict(mode="beam", max_calls=7, width=3, beam=2, depth=3)
    first_model, first_steps = StopsAt(6), Steps()
    first = loop_of(first_model, **settings)
    first_model.loop = first
    first.observers = [first_steps]
    cut = first.run(relu)
    assert cut.stopped and [r.iteration for r in cut.records] == [0, 1, 2, 3, 4]

    # The state a resumed job rebuilds from the run's iter_NNN/ files.
    state = LoopState(ProblemResult(relu, records=[s.record for s in first_steps.steps]), next_iteration=5,
                      kernels={s.record.iteration: (s.attempt.candidate.source, s.verdict, s.record)
                               for s in first_steps.steps})
    before = {r.iteration: (r.parent, r.depth, r.direction, r.state) for r in cut.records}
    model, steps = KeyedModel(), Steps()
    loop = loop_of(model, **settings)
    loop.observers = [steps]
    result = loop.run(relu, resume=state)
    assert model.calls == 2 and [s.record.iteration for s in steps.steps] == [5, 6]  # round 2 only
    assert [r.iteration for r in result.records] == list(range(7)) and not result.stopped
    assert {r.iteration: (r.parent, r.depth, r.direction, r.state) for r in result.records if r.iteration < 5} == before
    assert [(r.depth, r.parent) for r in result.records[5:]] == [(2, 2), (2, 4)]
    assert result.correct and repeat_of(result.best_code) == 40


def test_a_beam_job_killed_mid_tree_then_run_again_logs_each_node_once_and_verifies_only_new_ones(
        tmp_path: Path, pool, monkeypatch):
    """Through the pipeline and MLflow: SIGTERM lands as round 2 starts (nodes 0-2 recorded). The same
    command again takes nodes 0-2 from the run's iter_NNN/ files (no model call, no verification, no second
    log) and makes round 2's two nodes: the same tree and the same five calls as a job never cut off.
    width=2 keeps the tree free of timing noise: round 1's two correct children (REPEAT 190 and 50, four
    times apart) both survive, so round 2's parents do not depend on a close race."""
    import os
    import signal

    import mlflow

    import kforge.job.pipeline

    settings = ("loop=beam", "loop.max_calls=5", "loop.width=2", "loop.beam=2", "loop.depth=2")

    def tree(records):
        return [(r.iteration, r.parent, r.depth, r.direction, r.phase, r.state) for r in records]

    whole_model = KeyedModel()
    (whole,) = run(config(tmp_path / "whole", *settings), llm=whole_model, pool=pool).results
    assert whole_model.calls == 5 and [r.iteration for r in whole.records] == [0, 1, 2, 3, 4]
    assert [(r.parent, r.depth) for r in whole.records[3:]] == [(2, 2), (1, 2)]  # the fast branch first

    class SignalsMidTree(KeyedModel):
        """A scheduler's SIGTERM as round 2's calls start; those calls end once the job has stopped, so
        neither of round 2's nodes is verified."""

        loop, asked = None, 0

        def complete(self, messages, context=None):
            with self._lock:  # counted here, before the wait: round 2's two calls race, one signal only
                self.asked += 1
                nth = self.asked
            if nth == 4:
                os.kill(os.getpid(), signal.SIGTERM)
            if nth >= 4:
                assert self.loop.stop.wait(30), "SIGTERM did not stop the job"
            return super().complete(messages, context)

    cut_model = SignalsMidTree()

    class Seen(ProblemLoop):  # the job's loop, for its stop event
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            cut_model.loop = self

    with monkeypatch.context() as m:
        m.setattr(kforge.job.pipeline, "ProblemLoop", Seen)
        cut = run(config(tmp_path / "cut", *settings), llm=cut_model, pool=pool)
    assert cut.interrupted and cut.results == []
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/cut/mlflow.db")
    (problem_run,) = client.search_runs([client.get_experiment_by_name("kforge").experiment_id],
                                        "tags.`kforge.kind` = 'problem'")
    assert problem_run.info.status == "KILLED"
    assert sorted(m.step for m in client.get_metric_history(problem_run.info.run_id, "state_index")) == [0, 1, 2]

    model = KeyedModel()
    (resumed,) = run(config(tmp_path / "cut", *settings), llm=model, pool=pool).results
    # Only round 2's nodes were asked of the model and verified; the budget ends where the whole job's did.
    assert model.calls == 2 and 3 + model.calls == whole_model.calls
    parents = client.search_runs([client.get_experiment_by_name("kforge").experiment_id],
                                 "tags.`kforge.kind` = 'sweep-job'", order_by=["attributes.start_time DESC"])
    assert parents[0].data.metrics["verifications"] == 2
    # The same tree as the job never cut off, each node once, in id order.
    assert tree(resumed.records) == tree(whole.records)
    # The restored node 2 competes as recorded; its child is faster.
    assert (repeat_of(resumed.best_code), resumed.best_iteration) == (40, 3)
    assert [r.iteration for r in resumed.records if r.is_best][-1] == resumed.best_iteration
    (again,) = client.search_runs([client.get_experiment_by_name("kforge").experiment_id],
                                  "tags.`kforge.kind` = 'problem'")
    assert again.info.run_id == problem_run.info.run_id and again.info.status == "FINISHED"
    for metric in ("state_index", "parent", "depth"):  # every step logged once: nothing twice
        steps = [m.step for m in client.get_metric_history(again.info.run_id, metric)]
        assert sorted(steps) == sorted(set(steps)), (metric, steps)
    assert sorted(m.step for m in client.get_metric_history(again.info.run_id, "state_index")) == [0, 1, 2, 3, 4]
    assert {a.path for a in client.list_artifacts(again.info.run_id)} >= {f"iter_00{i}" for i in range(5)}


def test_a_wave_cut_off_part_way_resumes_with_its_recorded_nodes_and_makes_the_rest(relu):
    """A stop can land while a wave's nodes are verified concurrently: some are recorded, the others not.
    Resumed from nodes 0-2 of round 1's wave of three, the search makes node 3 and what follows, verifies
    nothing it restored, and places every node where a search never cut off does."""
    settings = dict(mode="beam", max_calls=7, width=3, beam=2, depth=3)
    whole_steps = Steps()
    whole = loop_of(KeyedModel(), **settings)
    whole.observers = [whole_steps]
    whole.run(relu)
    kept = [s for s in whole_steps.steps if s.record.iteration <= 2]
    state = LoopState(ProblemResult(relu, records=[s.record for s in kept]), next_iteration=3,
                      kernels={s.record.iteration: (s.attempt.candidate.source, s.verdict, s.record) for s in kept})

    model, steps = KeyedModel(), Steps()
    loop = loop_of(model, **settings)
    loop.observers = [steps]
    verified = []
    verify = loop.verifier.verify
    loop.verifier.verify = lambda problem, cand, backend: verified.append(cand.source) or verify(problem, cand, backend)
    result = loop.run(relu, resume=state)
    assert model.calls == len(verified) == 4 and [s.record.iteration for s in steps.steps] == [3, 4, 5, 6]
    assert not {s.attempt.candidate.source for s in kept} & set(verified)  # no restored kernel verified again
    def tree(records):
        return [(r.iteration, r.parent, r.depth, r.direction, r.phase, r.state) for r in records]
    assert tree(result.records)[:5] == tree(s.record for s in whole_steps.steps)[:5]
    assert [r.iteration for r in result.records] == list(range(7)) and all(r.depth == 2 for r in result.records[5:])

"""Beam search over kernels (``loop=beam``): a tree of optimisations instead of one chain, so a problem is
not stuck in the first local optimum its chain walks into (issue 24).

Round 0 is the iterative loop's functional pass: a single-shot kernel, then fix turns until one is
correct. Each later round, every kept node asks the advisor for ``width`` recommendations of distinct
bottleneck classes (`Advisor.recommend_many`), and the generation agent writes one child per
recommendation; the children are generated and verified concurrently (the verifier and its worker pool
are thread-safe; the pool gives each candidate a device slot). A failed child gets up to
``max_fixes_in_optimisation`` fix turns, each a node of its own under it. The survivors of a round are
its fastest correct nodes, no two of one recommendation class while a correct node of another class
is left (`select_survivors`); a round without a correct node keeps the nodes it started from.

Every node is one generation call and one iteration record: its ``iteration`` is its node id (MLflow's
step), ``parent``, ``depth`` and ``direction`` place it in the tree. Ids are handed out before a wave of
children starts, in a fixed order, and observers hear of the wave's nodes in id order from the problem's
own thread: a rerun of the same configuration replays each node's model call by its place
(`kforge.llm.replay`). The budget is ``loop.budget`` model calls (generation calls, and the analysis
model's calls where ``analysis=llm``) and ``loop.max_cost_usd``: a call is reserved before it starts, so
the call budget is never exceeded; the dollar limit is checked before each call, and calls already in
flight may end past it.

A problem cut off mid-tree resumes mid-tree: the tree is walked again in the same order, and a node whose
id was already recorded (`LoopState.kernels`, restored from MLflow) takes its recorded kernel, verdict and
record instead of a model call and a verification, and is not logged again; its call still counts against
the budget, so the walk goes on exactly where the first one stopped. Advisors are asked again for kept
nodes (a profiler profiles them again; an analysis model's reply is replayed), and a restored child keeps
its recorded direction.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..agents import Attempt, Recommendation, Reference
from ..agents.analysis import generic_directions
from ..candidate import Candidate
from ..problems import Problem
from ..verify import Verdict
from .chain import ProblemLoop
from .records import IterationRecord, LoopState, Step, make_record, rank_speedup

ROOT_DIRECTION = "root"
"""The direction of round 0's nodes: no recommendation led to them."""


@dataclass
class Node:
    """One kernel of the tree."""

    iteration: int
    """The node's id: its iteration (MLflow's step, ``iter_NNN/``)."""
    parent: int | None
    depth: int
    direction: str
    attempt: Attempt | None = None
    verdict: Verdict | None = None
    recommendation: Recommendation | None = None
    llm_s: float = 0.0
    verify_s: float = 0.0
    analysis_s: float = 0.0
    restored: IterationRecord | None = None
    """Resumed: the record an earlier run of this job logged for this node (nothing is run or logged again)."""

    @property
    def code(self) -> str | None:
        return self.attempt.candidate.source if self.attempt else None


def select_survivors(nodes: Sequence[Node], beam: int, speed: Callable[[Node], float | None]) -> list[Node]:
    """The ``beam`` fastest nodes (``speed`` None: not correct, never kept), no two of one direction while
    a node of a direction not yet kept is left. Equal speeds go to the lower id (the earlier node)."""
    ranked = sorted((n for n in nodes if speed(n) is not None), key=lambda n: (-speed(n), n.iteration))
    kept: list[Node] = []
    while ranked and len(kept) < beam:
        used = {k.direction for k in kept}
        pick = next((n for n in ranked if n.direction not in used), ranked[0])
        kept.append(pick)
        ranked.remove(pick)
    return kept


class Budget:
    """Model calls and dollars left to one problem; calls are reserved before they start."""

    def __init__(self, calls: int, max_cost_usd: float | None):
        self.calls_left, self.max_cost_usd, self.spent_usd = calls, max_cost_usd, 0.0
        self._lock = threading.Lock()

    def take(self, calls: int = 1) -> bool:
        """Reserve ``calls`` model calls, if they are left and the dollars are not spent."""
        with self._lock:
            if calls > self.calls_left or self.spent_out():
                return False
            self.calls_left -= calls
            return True

    def spent_out(self) -> bool:
        return self.max_cost_usd is not None and self.spent_usd >= self.max_cost_usd

    def spend(self, usd: float | None) -> None:
        with self._lock:
            self.spent_usd += usd or 0.0


class BeamSearch(ProblemLoop):
    """`ProblemLoop`'s interface and observers (``run(problem, reference, resume)``, `run_problems`), with a
    search tree for ``_iterate``."""

    def _iterate(self, problem: Problem, reference: Reference | None, state: LoopState) -> None:
        cfg, result = self.config, state.result
        # Cut off mid-tree: walk the tree again from its root, taking recorded nodes as they come (`_generate`).
        result.records.clear()
        result.best_code = result.best_verdict = result.best_iteration = None
        state.next_iteration, state.last_code, state.last_verdict = 0, None, None
        budget = Budget(cfg.budget, cfg.max_cost_usd)
        kinds = self.verifier.device_kinds(self.agent.backend)
        # Two per device slot: one child's model call or build overlaps another's timing; the pool itself
        # gives each run a slot of its own.
        workers = max(2, 2 * sum(self.verifier.pool.slot_count(k) for k in kinds))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"kforge-beam-{problem.key}") as pool:
            kept = self._root(problem, reference, state, budget)
            for depth in range(1, cfg.depth + 1):
                if not kept or self._finished(state, budget) or kept[0].verdict.runtime is None:
                    break  # nothing correct, done, or verified without timing: nothing to optimise against
                children = self._expand(problem, kept, depth, state, budget, pool)
                nodes = children + self._fix_waves(problem, children, state, budget, pool)
                kept = select_survivors(nodes, cfg.beam, self._speed) or kept
        walked = {r.iteration for r in result.records}
        for it, (code, verdict, record) in sorted(state.kernels.items()):
            if it not in walked:  # recorded, but not on this walk's path (the walk stopped before it)
                record.is_best = result.offer(code, verdict, it, cfg.speedup_vs)
                result.records.append(record)
        result.records.sort(key=lambda r: r.iteration)

    def _speed(self, node: Node) -> float | None:
        return rank_speedup(node.verdict, self.config.speedup_vs) if node.verdict and node.verdict.correct else None

    def _finished(self, state: LoopState, budget: Budget) -> bool:
        cfg = self.config
        if self.stop.is_set():
            state.result.stopped = True
            return True
        return state.result.reached(cfg.target_speedup, cfg.speedup_vs) or budget.calls_left <= 0 or budget.spent_out()

    # -- rounds ----------------------------------------------------------------------------------------
    def _root(self, problem: Problem, reference: Reference | None, state: LoopState,
              budget: Budget) -> list[Node]:
        """Round 0: the single-shot kernel, then fixes until one is correct; [] when none is."""
        node: Node | None = None
        while not self._finished(state, budget) and budget.take():
            step = Node(state.next_iteration, node.iteration if node else None, 0, ROOT_DIRECTION)
            state.next_iteration += 1
            if node is None:
                made = self._generate(problem, state, step, lambda it: self.agent.single_shot(problem, reference, iteration=it))
            else:
                made = self._generate(problem, state, step, self._fixer(problem, node))
            if not self._record(problem, [made], state, budget):
                return []
            node = made
            if node.verdict.correct:
                return [node]
        return []

    def _expand(self, problem: Problem, kept: list[Node], depth: int, state: LoopState, budget: Budget,
                pool: ThreadPoolExecutor) -> list[Node]:
        """One child per kept node and recommendation, verified concurrently."""
        cfg, per_call = self.config, getattr(self.advisor, "model_calls", 0)
        # A kept node is advised only while its analysis and its first child fit the budget; that child's
        # call stays reserved, so the analysis (and its cost, on the first child's record) is never wasted.
        advised = [n for n in kept if budget.take(per_call + 1)]
        directions = list(pool.map(lambda n: self._directions(problem, n), advised))
        specs: list[tuple[Node, Recommendation, bool]] = []
        for j in range(cfg.width):  # first directions of every node before second ones: a short budget spreads
            specs += [(n, recs[j], j == 0) for n, recs in zip(advised, directions) if j < len(recs)]
        wave: list[tuple[Node, Node]] = []
        for parent, rec, reserved in specs:
            if not reserved and (self._finished(state, budget) or not budget.take()):
                continue  # a node's first child is already paid for; the others wait for budget
            child = Node(state.next_iteration, parent.iteration, depth, rec.category, recommendation=rec)
            child.analysis_s = rec.artifacts.pop("analysis_s", 0.0)
            state.next_iteration += 1
            wave.append((parent, child))
        if self.stop.is_set():
            return []
        made = list(pool.map(lambda pc: self._generate(problem, state, pc[1], self._optimiser(problem, *pc)), wave))
        return self._record(problem, made, state, budget)

    def _fix_waves(self, problem: Problem, children: list[Node], state: LoopState, budget: Budget,
                   pool: ThreadPoolExecutor) -> list[Node]:
        """Up to ``max_fixes_in_optimisation`` fix turns for each failed child, a wave per turn."""
        fixed: list[Node] = []
        failed = [c for c in children if not c.verdict.correct]
        for _ in range(self.config.max_fixes_in_optimisation):
            wave = []
            for f in failed:
                if self._finished(state, budget) or not budget.take():
                    break
                wave.append((f, Node(state.next_iteration, f.iteration, f.depth, f.direction)))
                state.next_iteration += 1
            made = list(pool.map(lambda fw: self._generate(problem, state, fw[1], self._fixer(problem, fw[0])), wave))
            recorded = self._record(problem, made, state, budget)
            fixed += recorded
            failed = [n for n in recorded if not n.verdict.correct]
            if not failed or len(recorded) < len(made):
                break
        return fixed

    # -- one node ----------------------------------------------------------------------------------------
    def _directions(self, problem: Problem, node: Node) -> list[Recommendation]:
        """``width`` recommendations of distinct classes for ``node``'s kernel; the first carries the
        analysis time (and the analysis model's cost, which its child's record adds)."""
        a0 = time.monotonic()
        many = getattr(self.advisor, "recommend_many", None)
        if many is not None:
            recs = many(problem, node.code, node.verdict, self.config.width, iteration=node.iteration)
        else:  # an advisor of one recommendation: it leads, generic directions fill up
            first = self.advisor.recommend(problem, node.code, node.verdict, iteration=node.iteration)
            recs = [first] + generic_directions(self.config.width - 1, {first.category})
        seen: set[str] = set()
        recs = [r for r in recs if not (r.category in seen or seen.add(r.category))]
        if recs:
            recs[0].artifacts["analysis_s"] = time.monotonic() - a0
        return recs

    def _optimiser(self, problem: Problem, parent: Node, child: Node) -> Callable[[int], Attempt]:
        text = child.recommendation.text()
        return lambda it: self.agent.optimise(problem, parent.code, parent.verdict, text, iteration=it)

    def _fixer(self, problem: Problem, failed: Node) -> Callable[[int], Attempt]:
        return lambda it: self.agent.fix(problem, failed.code, failed.verdict, iteration=it)

    def _generate(self, problem: Problem, state: LoopState, node: Node, write: Callable[[int], Any]) -> Node:
        """The node's model call and verification (in a pool thread); not verified once stopped. A node an
        earlier run of the job recorded takes that run's kernel, verdict and place in the tree instead."""
        if node.iteration in state.kernels:
            code, node.verdict, node.restored = state.kernels[node.iteration]
            node.attempt = Attempt(node.restored.phase, [], Candidate(code))
            node.parent, node.depth, node.direction = (node.restored.parent, node.restored.depth or 0,
                                                       node.restored.direction or node.direction)
            return node
        t0 = time.monotonic()
        node.attempt = write(node.iteration)
        node.llm_s = time.monotonic() - t0
        if not self.stop.is_set():
            v0 = time.monotonic()
            node.verdict = self.verifier.verify(problem, node.attempt.candidate, self.agent.backend)
            node.verify_s = time.monotonic() - v0
        return node

    def _record(self, problem: Problem, nodes: list[Node], state: LoopState, budget: Budget) -> list[Node]:
        """Record a wave's verified nodes in id order and tell the observers; the nodes recorded."""
        cfg, result = self.config, state.result
        done = []
        for node in sorted(nodes, key=lambda n: n.iteration):
            if node.verdict is None:  # stopped during its model call: a rerun replays it
                state.result.stopped = True
                continue
            verdict = node.verdict
            is_best = result.offer(node.code, verdict, node.iteration, cfg.speedup_vs)
            record = node.restored
            if record is not None:  # logged by the earlier run: counted, not told again
                record.is_best = is_best
            else:
                record = make_record(node.iteration, node.attempt, verdict, node.recommendation, is_best=is_best,
                                     llm_s=node.llm_s, verify_s=node.verify_s, analysis_s=node.analysis_s,
                                     wall_s=node.llm_s + node.verify_s + node.analysis_s)
                record.parent, record.depth, record.direction = node.parent, node.depth, node.direction
            budget.spend(record.cost_usd)
            result.records.append(record)
            if node.restored is None:
                self._tell("iteration_done", problem, Step(record, node.attempt, verdict, node.recommendation))
            state.last_code, state.last_verdict = node.code, verdict
            done.append(node)
        return done

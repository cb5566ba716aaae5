"""Beam search over kernels (``loop=beam``), a `kforge.loop.runner.SearchStrategy`: a tree of optimisations instead of one chain, so a problem is
not stuck in the first local optimum its chain walks into (issue 24).

Round 0 is the iterative loop's functional pass: a single-shot kernel, then fix turns until one is
correct. Each later round, every kept node asks the advisor for ``width`` recommendations of distinct
bottleneck classes (`Advisor.recommend_many`), and the generation agent writes one child per
recommendation; the children are generated and verified concurrently (the verifier and its worker pool
are thread-safe; the pool gives each candidate a device slot). A failed child gets up to
``max_fixes_in_optimisation`` fix turns, each a node of its own under it. The survivors of a round are
its fastest correct nodes, no two of one recommendation class while a correct node of another class
is left (`select_survivors`); a round without a correct node keeps the nodes it started from.

Every node is one generation call and one iteration record, a `kforge.loop.step` step: its ``iteration`` is
its node id (MLflow's step), ``parent``, ``depth`` and ``direction`` place it in the tree. Ids are handed out before a wave of
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
from typing import Callable, Sequence

from ..agents import Attempt, Recommendation, Reference
from ..candidate import Candidate
from ..problems import Problem
from .records import LoopState, rank_speedup
from .step import Draft, record, stopping, write_and_verify
from .strategy import Runner

ROOT_DIRECTION = "root"
"""The direction of round 0's nodes: no recommendation led to them."""

Node = Draft
"""One kernel of the tree: a `kforge.loop.step.Draft` with its ``parent``, ``depth`` and ``direction`` set;
its ``iteration`` is its id."""


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


class BeamSearch:
    """The search tree, as a strategy of `kforge.loop.runner.ProblemLoop`."""

    def search(self, loop: Runner, problem: Problem, reference: Reference | None, state: LoopState) -> None:
        cfg = loop.config
        kinds = loop.verifier.device_kinds(loop.agent.backend)
        # Two per device slot: one child's model call or build overlaps another's timing; the pool itself
        # gives each run a slot of its own.
        workers = max(2, 2 * sum(loop.verifier.pool.slot_count(k) for k in kinds))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"kforge-beam-{problem.key}") as pool:
            _Tree(loop, problem, state, Budget(cfg.budget, cfg.max_cost_usd), pool).walk(reference)


class _Tree:
    """One problem's walk of the tree: its rounds, each node a `kforge.loop.step` step split in two, so that a
    wave's nodes are written and verified at once and recorded in id order."""

    def __init__(self, loop: Runner, problem: Problem, state: LoopState, budget: Budget,
                 pool: ThreadPoolExecutor):
        self.loop, self.problem, self.state, self.budget, self.pool = loop, problem, state, budget, pool
        self.agent, self.config, self.advisor = loop.agent, loop.config, loop.advisor

    def walk(self, reference: Reference | None) -> None:
        cfg, state, result = self.config, self.state, self.state.result
        # Cut off mid-tree: walk the tree again from its root, taking recorded nodes as they come (`_generate`).
        result.records.clear()
        result.best_code = result.best_verdict = result.best_iteration = None
        state.next_iteration, state.last_code, state.last_verdict = 0, None, None
        kept = self._root(reference)
        for depth in range(1, cfg.depth + 1):
            if not kept or self._finished() or kept[0].verdict.runtime is None:
                break  # nothing correct, done, or verified without timing: nothing to optimise against
            children = self._expand(kept, depth)
            nodes = children + self._fix_waves(children)
            kept = select_survivors(nodes, cfg.beam, self._speed) or kept
        walked = {r.iteration for r in result.records}
        for it, (code, verdict, rec) in sorted(state.kernels.items()):
            if it not in walked:  # recorded, but not on this walk's path (the walk stopped before it)
                rec.is_best = result.offer(code, verdict, it, cfg.speedup_vs)
                result.records.append(rec)
        result.records.sort(key=lambda r: r.iteration)

    def _speed(self, node: Node) -> float | None:
        return rank_speedup(node.verdict, self.config.speedup_vs) if node.verdict and node.verdict.correct else None

    def _finished(self) -> bool:
        cfg, state, budget = self.config, self.state, self.budget
        if stopping(self.loop, state.result):
            return True
        return state.result.reached(cfg.target_speedup, cfg.speedup_vs) or budget.calls_left <= 0 or budget.spent_out()

    # -- rounds ----------------------------------------------------------------------------------------
    def _root(self, reference: Reference | None) -> list[Node]:
        """Round 0: the single-shot kernel, then fixes until one is correct; [] when none is."""
        problem, state = self.problem, self.state
        node: Node | None = None
        while not self._finished() and self.budget.take():
            step = Node(state.next_iteration, node.iteration if node else None, 0, ROOT_DIRECTION)
            state.next_iteration += 1
            if node is None:
                made = self._generate(step, lambda it: self.agent.single_shot(problem, reference, iteration=it))
            else:
                made = self._generate(step, self._fixer(node))
            if not self._record([made]):
                return []
            node = made
            if node.verdict.correct:
                return [node]
        return []

    def _expand(self, kept: list[Node], depth: int) -> list[Node]:
        """One child per kept node and recommendation, verified concurrently."""
        cfg, state, budget, pool = self.config, self.state, self.budget, self.pool
        per_call = self.advisor.model_calls
        # A kept node is advised only while its analysis and its first child fit the budget; that child's
        # call stays reserved, so the analysis (and its cost, on the first child's record) is never wasted.
        advised = [n for n in kept if budget.take(per_call + 1)]
        directions = list(pool.map(self._directions, advised))
        specs: list[tuple[Node, Recommendation, bool]] = []
        for j in range(cfg.width):  # first directions of every node before second ones: a short budget spreads
            specs += [(n, recs[j], j == 0) for n, recs in zip(advised, directions) if j < len(recs)]
        wave: list[tuple[Node, Node]] = []
        for parent, rec, reserved in specs:
            if not reserved and (self._finished() or not budget.take()):
                continue  # a node's first child is already paid for; the others wait for budget
            child = Node(state.next_iteration, parent.iteration, depth, rec.category, recommendation=rec)
            state.next_iteration += 1
            wave.append((parent, child))
        if stopping(self.loop, state.result):
            return []
        made = list(pool.map(lambda pc: self._generate(pc[1], self._optimiser(*pc)), wave))
        return self._record(made)

    def _fix_waves(self, children: list[Node]) -> list[Node]:
        """Up to ``max_fixes_in_optimisation`` fix turns for each failed child, a wave per turn."""
        state, budget = self.state, self.budget
        fixed: list[Node] = []
        failed = [c for c in children if not c.verdict.correct]
        for _ in range(self.config.max_fixes_in_optimisation):
            wave = []
            for f in failed:
                if self._finished() or not budget.take():
                    break
                wave.append((f, Node(state.next_iteration, f.iteration, f.depth, f.direction)))
                state.next_iteration += 1
            made = list(self.pool.map(lambda fw: self._generate(fw[1], self._fixer(fw[0])), wave))
            recorded = self._record(made)
            fixed += recorded
            failed = [n for n in recorded if not n.verdict.correct]
            if not failed or len(recorded) < len(made):
                break
        return fixed

    # -- one node ----------------------------------------------------------------------------------------
    def _directions(self, node: Node) -> list[Recommendation]:
        """``width`` recommendations of distinct classes for ``node``'s kernel; the first carries the
        analysis time (and the analysis model's cost, which its child's record adds)."""
        a0 = time.monotonic()
        recs = self.advisor.recommend_many(self.problem, node.code, node.verdict, self.config.width,
                                           iteration=node.iteration)
        seen: set[str] = set()
        recs = [r for r in recs if not (r.category in seen or seen.add(r.category))]
        if recs:
            recs[0].analysis_s = time.monotonic() - a0
        return recs

    def _optimiser(self, parent: Node, child: Node) -> Callable[[int], Attempt]:
        problem, text = self.problem, child.recommendation.text()
        return lambda it: self.agent.optimise(problem, parent.code, parent.verdict, text, iteration=it)

    def _fixer(self, failed: Node) -> Callable[[int], Attempt]:
        return lambda it: self.agent.fix(self.problem, failed.code, failed.verdict, iteration=it)

    def _generate(self, node: Node, write: Callable[[int], Attempt]) -> Node:
        """The node's model call and verification (in a pool thread; `kforge.loop.step.write_and_verify`). A
        node an earlier run of the job recorded takes that run's kernel, verdict and place in the tree instead."""
        if node.iteration in self.state.kernels:
            code, node.verdict, node.restored = self.state.kernels[node.iteration]
            node.attempt = Attempt(node.restored.phase, [], Candidate(code))
            node.parent, node.depth, node.direction = (node.restored.parent, node.restored.depth or 0,
                                                       node.restored.direction or node.direction)
            return node
        return write_and_verify(self.loop, self.problem, node, write)

    def _record(self, nodes: list[Node]) -> list[Node]:
        """Record a wave's verified nodes in id order from the problem's thread (`kforge.loop.step.record`);
        the nodes recorded. A node the stop left unverified is not: a rerun replays it."""
        done = []
        for node in sorted(nodes, key=lambda n: n.iteration):
            rec = record(self.loop, self.problem, self.state, node)
            if rec is not None:
                self.budget.spend(rec.cost_usd)
                done.append(node)
        return done

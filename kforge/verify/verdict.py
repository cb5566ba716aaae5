"""What the verifier says about a candidate: a `Verdict` with exactly one `State`, evidence and timings."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Mapping


class State(str, Enum):
    """The outcome of verifying one candidate; exactly one per verdict."""

    GENERATION_FAILURE = "generation_failure"  # no usable program in the model's reply
    COMPILATION_FAILURE = "compilation_failure"  # the program or its kernels do not build
    RUNTIME_ERROR = "runtime_error"  # it built but raised, crashed or faulted while running
    SHAPE_MISMATCH = "shape_mismatch"  # outputs of the wrong number, shape, dtype or device
    NUMERICAL_MISMATCH = "numerical_mismatch"  # right structure, wrong values (or NaN/Inf, or degenerate)
    TIMEOUT = "timeout"  # it ran past the wall-clock limit and was killed
    CHEAT_DETECTED = "cheat_detected"  # evidence of deception: it games the harness (static rule or runtime defence)
    KERNEL_UNUSED = "kernel_unused"  # right outputs, but PyTorch computed them, not the candidate's kernels (no cheat)
    CORRECT = "correct"  # matches the reference on every trial

    def __str__(self) -> str:
        return self.value


STATES = tuple(s.value for s in State)


def correct_under(states: Mapping[str, str], rules: str, state: str | None) -> bool:
    """Whether a verification is correct under rule set ``rules``, from its ``states`` (`Verdict.states`, or a
    results row's ``states``); one recorded before rule sets (no entry) answers by its own ``state``. The one
    definition: the loop's records, `kforge eval`'s summary and the tracker all ask it."""
    return states.get(rules, state) == State.CORRECT.value


@dataclass
class TimingStats:
    """Summary of one program's timed calls (milliseconds)."""

    median_ms: float
    mean_ms: float
    std_ms: float
    n: int
    min_ms: float
    host_median_ms: float | None = None
    """Median host wall time with a full device synchronize (equals median_ms on CPU)."""
    rel_err: float | None = None
    """Estimated relative standard error of the median."""

    @classmethod
    def from_samples(cls, samples: list[float], host: list[float] | None = None) -> "TimingStats":
        n = len(samples)
        med = statistics.median(samples)
        std = statistics.stdev(samples) if n > 1 else 0.0
        return cls(median_ms=med, mean_ms=statistics.fmean(samples), std_ms=std, n=n, min_ms=min(samples),
                   host_median_ms=statistics.median(host) if host else None,
                   rel_err=median_rel_err(samples))


def median_rel_err(samples: list[float]) -> float:
    """Relative standard error of the median, from the interquartile range (robust to outliers)."""
    n = len(samples)
    if n < 4:
        return math.inf
    q = statistics.quantiles(samples, n=4)
    sigma = (q[2] - q[0]) / 1.349  # IQR of a normal distribution is 1.349 sigma
    med = statistics.median(samples)
    if med <= 0:
        return math.inf
    return 1.2533 * sigma / math.sqrt(n) / med  # 1.2533 = sqrt(pi/2): efficiency of the median


@dataclass
class Evidence:
    """Why a verdict is what it is: enough for a person, or a model's fix prompt, to act on."""

    compiler_log: str | None = None
    """Tail of the compiler's output for a build failure."""
    traceback: str | None = None
    """Tail of the Python traceback for a runtime error."""
    mismatch: dict[str, Any] | None = None
    """For mismatches: trial, output index, max abs/rel error and where, expected vs got."""
    output_tail: str | None = None
    """Tail of what the candidate's process printed."""
    findings: list[dict[str, Any]] = field(default_factory=list)
    """Static-check findings: rule, message, line."""
    notes: list[str] = field(default_factory=list)
    """Anything else worth knowing (e.g. the compile reference failed, timing budget hit)."""


@dataclass
class KernelUse:
    """One kernel (GPU) or operator/extension call (CPU) of the candidate's forward, with its origin."""

    name: str
    origin: str
    """``candidate`` (its own extensions and Triton kernels), ``torch``, ``library`` (cuBLAS, cuDNN, CUTLASS,
    MKL/oneDNN, ...) or ``unknown``."""
    ms: float
    """Device time (GPU) or self CPU time in one forward."""
    calls: int
    share: float
    """Of the forward's total kernel (GPU) or operator-plus-extension (CPU) time."""


@dataclass
class Attribution:
    """What ran inside the candidate's forward in one correctness trial (see `kforge.verify.attribution`)."""

    kernel_share: float | None = None
    """Share of the forward's device time (CPU: compiled-code time) spent in the candidate's own kernels."""
    shares: dict[str, float] = field(default_factory=dict)
    """Share of that time per origin: candidate, torch, library, unknown."""
    total_ms: float = 0.0
    top: list[KernelUse] = field(default_factory=list)
    """The longest-running kernels or calls, with their origin."""
    output_from_kernel: bool | None = None
    """Whether an output derives from memory the candidate's kernels wrote (None: could not be tracked)."""
    replayed_ops: list[str] | None = None
    """The reference's PyTorch operators, when the candidate's forward ran every one of them too."""
    backward_share: float | None = None
    """Backward mode: the candidate's kernels' share of the backward pass alone (``kernel_share`` covers the whole
    training step)."""
    gradient_from_kernel: bool | None = None
    """Backward mode: whether a gradient derives from what the candidate's kernels wrote in the backward pass."""
    kernel_calls: int | None = None
    """Calls into the candidate's kernels that kforge's hooks counted in the profiled call (None: not profiled)."""
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Attribution | None":
        if not d:
            return None
        d = dict(d)
        d["top"] = [KernelUse(**k) for k in d.get("top") or []]
        return cls(**d)


class Work:
    """Whose code computed the answer (``Facets.work``), as the run measured it."""

    OWN = "own"  # the candidate's kernels ran and an output derives from them (or derivation could not be told)
    NONE = "none"  # its kernels did not run (or it has none): PyTorch computed the answer
    BUILD_FAILED = "build_failed"  # its extension failed to build; its code caught that and PyTorch ran instead
    BYPASSED = "bypassed"  # its kernels ran, but no output derives from what they wrote: a decoy
    REPLAYED = "replayed"  # it re-ran every operator of the reference in PyTorch; what its kernels added is unknown


@dataclass
class Facets:
    """What a verification established, each part on its own; `decide` turns them into a state."""

    outcome: str
    """The run's outcome before any kernel-use policy: ``correct`` (outputs match on every trial), a failure
    or mismatch state, or ``cheat_detected`` for an integrity finding."""
    outcome_rule: str | None = None
    """The rule behind a ``cheat_detected`` outcome (integrity) or a named failure."""
    work: str | None = None
    """A `Work` value; None when nothing was measured and no static rule spoke."""
    work_rule: str | None = None
    """The rule that names the work facet (``kernel_not_run``, ``output_not_from_kernel``, a static rule, ...)."""
    work_message: str = ""
    """Why, for a person: what ran, and what it means."""
    kernel_share: float | None = None
    """Share of the forward's device time in the candidate's own kernels (None: not measured)."""
    kb_outcome: str | None = None
    """The outputs' outcome under KernelBench's numerics (its reference and tolerance), where it differs from
    ``outcome`` (`kforge.verify.numerics`); None: the same."""
    kb_rule: str | None = None
    kb_message: str = ""
    variant_outcome: str | None = None
    """How the candidate fared on the problem's shape variants (the kforge rules' question, `kforge.verify.variants`);
    None: not checked."""
    variant_rule: str | None = None
    variant_message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Facets | None":
        return cls(**d) if d else None


@dataclass
class Verdict:
    """The verifier's answer for one candidate on one problem and backend."""

    state: State
    message: str
    problem: str = ""
    backend: str = ""
    device: str = ""
    runtime: TimingStats | None = None
    """The candidate's timing (only for correct candidates)."""
    ref: TimingStats | None = None
    """The eager PyTorch reference's timing, measured in the same worker."""
    compile_ref: TimingStats | None = None
    """The ``torch.compile`` reference's timing (None when disabled or when compilation failed)."""
    evidence: Evidence = field(default_factory=Evidence)
    rule: str | None = None
    """The static or runtime rule that fired, for ``cheat_detected``."""
    trials: int = 0
    """Correctness trials that ran."""
    wall_s: float = 0.0
    """Wall time of the whole verification."""
    source_hash: str = ""
    floor_ms: float | None = None
    """Roofline floor of the problem on this device, where its FLOPs/bytes and the ceilings are known."""
    build: dict[str, Any] | None = None
    """The build phase: extensions ``built`` and ``cached`` (build directories) and its ``seconds``."""
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds the run spent in each phase (setup, load, correctness, timing)."""
    attribution: Attribution | None = None
    """What ran in the candidate's forward: kernel share, top kernels by origin, dataflow (None: not measured)."""
    ref_strict: TimingStats | None = None
    """The eager reference timed in strict fp32 (TF32 off), the numerics correctness is judged in;
    ``ref`` is timed with PyTorch's default numerics, as people run it and speedups are quoted against."""
    problem_flags: list[str] = field(default_factory=list)
    """From the problem audit: ``stochastic``, ``degenerate``, ``launch_bound``."""
    rules: str = "kforge"
    """The rule set ``state`` is decided under (`kforge.verify.rules`)."""
    states: dict[str, str] = field(default_factory=dict)
    """The state under every rule set (``kforge``, ``kernelbench``, ``strict``), from the same facets."""
    facets: Facets | None = None
    """What the run established, part by part, before a rule set decided (None: it never ran)."""
    precision: str = "fp32"
    """The precision it was judged at (`kforge.precision`): inputs, weights and baselines."""

    @property
    def correct(self) -> bool:
        return self.state is State.CORRECT

    def correct_under(self, rules: str) -> bool:
        """Whether the candidate is correct under that rule set (its own state when none was recorded)."""
        return correct_under(self.states, rules, self.state.value)

    @property
    def speedup_eager(self) -> float | None:
        if self.runtime and self.ref and self.runtime.median_ms > 0:
            return self.ref.median_ms / self.runtime.median_ms
        return None

    @property
    def speedup_compile(self) -> float | None:
        if self.runtime and self.compile_ref and self.runtime.median_ms > 0:
            return self.compile_ref.median_ms / self.runtime.median_ms
        return None

    @property
    def kernel_share(self) -> float | None:
        return self.attribution.kernel_share if self.attribution else None

    @property
    def speed_of_light(self) -> float | None:
        """Floor time over measured time (1.0 = at the roofline)."""
        if self.floor_ms and self.runtime and self.runtime.median_ms > 0:
            return self.floor_ms / self.runtime.median_ms
        return None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        d.update(correct=self.correct, speedup_eager=self.speedup_eager, speedup_compile=self.speedup_compile,
                 speed_of_light=self.speed_of_light,
                 runtime_ms=self.runtime.median_ms if self.runtime else None,
                 ref_runtime_ms=self.ref.median_ms if self.ref else None,
                 compile_ref_runtime_ms=self.compile_ref.median_ms if self.compile_ref else None,
                 ref_strict_ms=self.ref_strict.median_ms if self.ref_strict else None,
                 kernel_share=self.kernel_share)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Verdict":
        def stats(x):
            return TimingStats(**x) if x else None
        return cls(state=State(d["state"]), message=d.get("message", ""), problem=d.get("problem", ""),
                   backend=d.get("backend", ""), device=d.get("device", ""), runtime=stats(d.get("runtime")),
                   ref=stats(d.get("ref")), compile_ref=stats(d.get("compile_ref")),
                   evidence=Evidence(**(d.get("evidence") or {})), rule=d.get("rule"),
                   trials=d.get("trials", 0), wall_s=d.get("wall_s", 0.0), source_hash=d.get("source_hash", ""),
                   floor_ms=d.get("floor_ms"), build=d.get("build"), phases=d.get("phases") or {},
                   attribution=Attribution.from_dict(d.get("attribution")), ref_strict=stats(d.get("ref_strict")),
                   problem_flags=list(d.get("problem_flags") or []), rules=d.get("rules") or "kforge",
                   states=dict(d.get("states") or {}), facets=Facets.from_dict(d.get("facets")),
                   precision=d.get("precision") or "fp32")

    def summary(self) -> str:
        """A few readable lines for a terminal."""
        lines = [f"{self.state.value}: {self.message}"]
        where = " · ".join(x for x in (self.problem, self.backend, self.device,
                                       self.precision if self.precision != "fp32" else "") if x)
        if where:
            lines.append(f"  {where}")
        if self.runtime:
            lines.append(f"  candidate  {_fmt(self.runtime)}")
        if self.ref:
            lines.append(f"  eager      {_fmt(self.ref)}   speedup {self.speedup_eager:.2f}x"
                         if self.speedup_eager else f"  eager      {_fmt(self.ref)}")
        if self.compile_ref:
            lines.append(f"  compile    {_fmt(self.compile_ref)}   speedup {self.speedup_compile:.2f}x"
                         if self.speedup_compile else f"  compile    {_fmt(self.compile_ref)}")
        if self.ref_strict:
            lines.append(f"  eager, TF32 off {_fmt(self.ref_strict)}")
        if self.speed_of_light:
            lines.append(f"  speed of light {100 * self.speed_of_light:.0f}% (floor {self.floor_ms:.4g} ms)")
        if self.attribution and self.attribution.kernel_share is not None:
            a = self.attribution
            lines.append(f"  kernel share {100 * a.kernel_share:.1f}% ("
                         + ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(a.shares.items(), key=lambda kv: -kv[1]))
                         + ")" + ("" if a.output_from_kernel is not False else "; the output bypasses its kernels")
                         + ("" if a.backward_share is None else f"; backward alone {100 * a.backward_share:.1f}%"))
        if self.problem_flags:
            lines.append(f"  problem: {', '.join(self.problem_flags)}")
        others = {k: s for k, s in self.states.items() if k != self.rules and s != self.state.value}
        if others:
            lines.append("  under other rules: " + ", ".join(f"{k} {s}" for k, s in others.items()))
        ev = self.evidence
        if self.rule:
            lines.append(f"  rule: {self.rule}")
        if ev.mismatch:
            m = ev.mismatch
            # on a correct verdict the mismatch is another rule set's failure: said as such, not as this one's
            whose = f"{' and '.join(others)}: " if self.state is State.CORRECT and others else ""
            lines.append(f"  {whose}" + ", ".join(f"{k}={v}" for k, v in m.items() if v is not None))
        for tail, label in ((ev.compiler_log, "compiler"), (ev.traceback, "traceback")):
            if tail:
                lines.append(f"  --- {label} (tail) ---")
                lines.extend("  " + ln for ln in tail.strip().splitlines()[-15:])
        for note in ev.notes:
            lines.append(f"  note: {note}")
        lines.append(f"  ({self.trials} trials, {self.wall_s:.1f} s)")
        return "\n".join(lines)


def _fmt(t: TimingStats) -> str:
    return f"{t.median_ms:9.4f} ms median  (mean {t.mean_ms:.4f}, std {t.std_ms:.4f}, n={t.n})"

"""The verifier's requests to a worker's child and what comes back: ``build``, ``run`` and ``audit``.

Built by `kforge.verify.verifier.Verifier`, served by `kforge.verify.worker`; the codec, the envelope
(`kforge.sandbox.protocol.Reply`) and the rule that a message is checked field by field when it is read are
the sandbox's. A `RunResult` is what the run established, before any rule set decides a state: the
verifier turns it into a `Verdict` in one place (`kforge.verify.conclude`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..backends import BackendSpec
from ..sandbox.harness import PROBLEM_ERROR
from ..sandbox.protocol import Message, ProgramRequest, Request
from .verdict import STATES, Attribution, Evidence, TimingStats


@dataclass(frozen=True, kw_only=True)
class BuildResult(Message):
    """The build phase: the candidate imported (and, if it builds there, constructed) with no device visible."""

    built: list[str] = field(default_factory=list)
    """Extensions compiled now (their build directories)."""
    cached: list[str] = field(default_factory=list)
    """Extensions found in the build cache."""
    failed: dict[str, str] = field(default_factory=dict)
    """Builds that failed and that the candidate caught (build key -> compiler log tail): the run fails them at
    once instead of compiling again."""
    compile_error: str | None = None
    """The candidate does not build: the compiler's (or Python's syntax) error."""
    import_error: str | None = None
    """Anything else its import raised: judged in the run, which has a device."""
    refused_write: str | None = None
    """A file write the write guard refused (`kforge.sandbox.writeguard`): the verdict, whatever the candidate
    made of the refusal."""


@dataclass(frozen=True, kw_only=True)
class BuildRequest(Request):
    KIND: ClassVar[str] = "build"
    RESULT: ClassVar[type[Message]] = BuildResult
    backend: BackendSpec
    arch: str | None = None
    """TORCH_CUDA_ARCH_LIST for CUDA builds."""


@dataclass(frozen=True, kw_only=True)
class ProblemAudit(Message):
    """The problem on its own on one device (`kforge.verify.audit`); cached on disk per problem and device."""

    flags: list[str]
    """``stochastic``, ``degenerate``, ``launch_bound``, ``stateful``."""
    state: list[str] = field(default_factory=list)
    """The module attributes the reference's forward reassigns, or else the tensors it changes in place where its
    output follows them (a ``stateful`` problem's state)."""
    constant_draws: list[int] = field(default_factory=list)
    """Of the draws made to test for a degenerate problem: how many gave a constant output, and of how many."""
    ref_ms: float = 0.0
    """The reference's forward time, measured once."""
    flops: float | None = None
    """Matrix products' and convolutions' FLOPs of one forward (None: none counted)."""
    counted: bool = False
    """Whether the FLOP counter traced the forward: then ``flops`` None means no matrix product or convolution."""
    bytes: float = 0.0
    """Inputs and parameters read once and outputs written once."""
    out_bytes: float = 0.0
    input_bytes: int = 0
    param_bytes: int = 0
    peak_bytes: int | None = None
    """Peak device memory of one forward (CUDA only)."""
    device: str = ""


@dataclass(frozen=True, kw_only=True)
class AuditResult(Message):
    audit: ProblemAudit | None = None
    error: str | None = None
    """Why the problem could not be audited (it fails on its own)."""
    evidence: Evidence | None = None
    ref: TimingStats | None = None
    """Eager's timing, where the request asked for the baselines."""
    compile_ref: TimingStats | None = None
    """``torch.compile``'s, timed beside it (None: not asked, or it failed: the run says why)."""


@dataclass(frozen=True, kw_only=True)
class AuditRequest(ProgramRequest):
    KIND: ClassVar[str] = "audit"
    RESULT: ClassVar[type[Message]] = AuditResult
    baselines: bool = False
    """Also time eager and ``torch.compile`` on the problem's inputs, in the run's regime (`Verifier.prepare`)."""


@dataclass(frozen=True, kw_only=True)
class WorkFacet(Message):
    """Whose code computed the answer, as the run measured it (the `Facets` fields of the same names)."""

    work: str
    """A `kforge.verify.verdict.Work` value."""
    work_rule: str | None = None
    work_message: str = ""


@dataclass(frozen=True, kw_only=True)
class Outcome(Message):
    """How a part of a run ended where it differs from the run's own state: the outputs under KernelBench's
    numerics, or on the problem's shape variants."""

    state: str
    message: str = ""
    rule: str | None = None
    mismatch: dict[str, Any] | None = None
    """Where it failed (trial, output, index, expected, got, tolerance), as the run's evidence has it."""


@dataclass(frozen=True, kw_only=True)
class ShapeVariant(Message):
    """The problem at other sizes: a correctness check of the candidate on shapes it was not shown."""

    overrides: dict[str, Any]
    """The module-level constants changed (``{"batch_size": 47, "dim": 3071}``)."""
    source: str
    """The problem's program with those constants."""
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    """Overrides to try, in turn, where the reference itself fails at ``overrides`` (a size heads or groups must
    divide)."""
    fallback_sources: list[str] = field(default_factory=list)
    """The problem's program with each fallback's constants."""


@dataclass(frozen=True, kw_only=True)
class RunResult(Message):
    """What one run established: its outcome (a state's name, or ``problem_error`` when the problem itself
    failed), the evidence, timings, whose code did the work, and the problem's audit."""

    state: str
    message: str = ""
    rule: str | None = None
    """The run-time rule behind a ``cheat_detected`` outcome or a named failure."""
    evidence: Evidence = field(default_factory=Evidence)
    work: WorkFacet | None = None
    trials: int = 0
    """Correctness trials that ran."""
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds in each phase (setup, load, correctness, timing, ...)."""
    attribution: Attribution | None = None
    audit: ProblemAudit | None = None
    runtime: TimingStats | None = None
    ref: TimingStats | None = None
    compile_ref: TimingStats | None = None
    ref_strict: TimingStats | None = None
    kernelbench: Outcome | None = None
    """The outputs under KernelBench's numerics, where that differs from ``state`` (`kforge.verify.numerics`)."""

    def __post_init__(self) -> None:
        if self.state not in STATES and self.state != PROBLEM_ERROR:
            raise ValueError(f"state must be one of {', '.join(STATES)} or {PROBLEM_ERROR}, not {self.state!r}")


@dataclass(frozen=True, kw_only=True)
class RunProgress(Message):
    """What a run had established when it last reported (the ``run`` milestone, `kforge.sandbox.progress`): read
    when it was stopped at its time limit in kforge's own measuring, after its correctness trials passed."""

    trials: int = 0
    """Correctness trials the candidate had passed."""
    audit: ProblemAudit | None = None
    notes: list[str] = field(default_factory=list)
    runtime: TimingStats | None = None
    ref: TimingStats | None = None
    compile_ref: TimingStats | None = None
    ref_strict: TimingStats | None = None
    mismatch: dict[str, Outcome] = field(default_factory=dict)
    """Numerics views (`kforge.verify.numerics`) whose outputs had failed by then, with their first mismatch."""


@dataclass(frozen=True, kw_only=True)
class RunRequest(ProgramRequest):
    KIND: ClassVar[str] = "run"
    RESULT: ClassVar[type[Message]] = RunResult
    own_streams: bool = False
    """The candidate makes CUDA streams of its own (static rules): it is timed with the device settled."""
    failed_builds: dict[str, str] = field(default_factory=dict)
    """Builds the build phase saw fail (key -> log): they fail at once in the run instead of compiling again."""


@dataclass(frozen=True, kw_only=True)
class VariantsResult(Message):
    """The candidate on the problem's shape variants (`kforge.verify.variants`)."""

    failure: Outcome | None = None
    """The first variant it failed on; None: correct on every variant checked."""
    checked: list[str] = field(default_factory=list)
    """The variants it was correct on (``batch_size=47, dim=3071``)."""
    skipped: list[str] = field(default_factory=list)
    """Variants the reference itself fails at, and why."""


@dataclass(frozen=True, kw_only=True)
class VariantsRequest(ProgramRequest):
    KIND: ClassVar[str] = "variants"
    RESULT: ClassVar[type[Message]] = VariantsResult
    variants: list[ShapeVariant]
    failed_builds: dict[str, str] = field(default_factory=dict)
    kernels_counted: bool = False
    """kforge's hooks counted calls into the candidate's kernels in the run at the problem's own shape: at each
    variant they must count some too (`kforge.verify.variant_checks`)."""
    kernel_share: float | None = None
    """The candidate's kernel share in the run at the problem's own shape: at each variant its kernels must do about as
    much of the work (`kforge.verify.variant_work`)."""
    others: list[str] = field(default_factory=list)
    """The operators of PyTorch and libraries its forward ran at the problem's own shape (the attribution's top): a
    share that falls at a variant where none other ran is the same path at another size, not PyTorch instead."""

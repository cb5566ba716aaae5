"""The harness that runs inside a freshly forked worker process, one candidate per process.

It serves the verifier's request kinds (registered in `kforge.verify.verifier`): ``build`` (import the
candidate with no GPU visible, and construct it if it builds in ``__init__``, so its extensions compile
in the CPU build pool), ``run`` (correctness trials then timing) and ``audit`` (the problem alone). The
process exits after one request, so nothing a candidate changes — patched functions, leaked threads, a
broken CUDA context — reaches the next verdict.

Order inside ``run``: trusted clocks and functions are captured, the reference is built, and only
then is candidate code imported. Each correctness trial draws fresh inputs from a secret seed, runs
the reference first on its own copy, then the candidate on another copy, with uninitialised memory
NaN-filled so unwritten outputs show. Timing interleaves eager, ``torch.compile`` and the candidate
round by round, and every few rounds refills an input set in place and re-checks the output, so an
output cache keyed by pointer or shape fails.
"""

from __future__ import annotations

import contextlib
import os
import traceback

from ..backends import WorkerContext, from_spec
from ..cachefile import read_json, write_json
from ..sandbox.harness import PROBLEM_ERROR, HarnessVerdict, first_line, tail
from ..sandbox.imports import import_candidate, import_file
from ..sandbox.progress import phase, phase_times
from ..sandbox.protocol import ProtocolError
from ..sandbox.writeguard import install_write_guard
from .phases import OwnPhases
from .protocol import (
    AuditRequest,
    AuditResult,
    BuildRequest,
    BuildResult,
    Outcome,
    ProblemAudit,
    RunRequest,
    RunResult,
    VariantsRequest,
    VariantsResult,
)
from .stateful import note as stateful_note
from .timed import RunEnd, TimedRounds
from .trials import Trials
from .verdict import Evidence


def build(req: BuildRequest) -> BuildResult:
    """Import the candidate with no device visible, so its extensions compile in the CPU build pool."""
    from ..backends.build import CompilationError
    backend = from_spec(req.backend)
    backend.prepare(WorkerContext(cache_dir=req.cache_dir, arch=req.arch, build_only=True))
    phase("build")
    guard = install_write_guard(os.getcwd(), req.cache_dir)
    try:
        with _reporting_the_device(backend):
            module = import_candidate()
            _construct_for_its_builds(module, backend.builder)
    except CompilationError as exc:
        result = BuildResult(compile_error=tail(exc.log))
    except SyntaxError as exc:
        result = BuildResult(compile_error=f"Python syntax error in the candidate: line {exc.lineno}: {exc.msg}\n"
                             + tail(traceback.format_exc(limit=0)))
    except BaseException:  # noqa: BLE001 - anything else is judged in the run phase, with a device
        result = BuildResult(import_error=tail(traceback.format_exc()))
    else:
        b = backend.builder
        result = BuildResult(built=list(b.built) if b else [], cached=list(b.hits) if b else [],
                             failed={k: tail(log) for k, log in b.failed.items()} if b else {})
    refused = guard.finding()  # a refused write is the verdict, whatever the candidate made of the refusal
    return BuildResult(refused_write=refused[1]) if refused else result


def _construct_for_its_builds(module, builder) -> None:
    """A candidate that built nothing on import but builds extensions at all most often builds them in
    ``ModelNew.__init__`` (an extension on ``self``); construct it once, on the CPU, so that build runs here
    in the build pool and the run finds it cached, instead of compiling for a minute on the GPU slot (seen
    with published RL-written kernels). A build failing here is the candidate's compilation failure; any
    other error (a tensor put on the hidden GPU, say) is left for the run to judge, with a device."""
    from ..backends.build import CompilationError
    if builder is None or builder.built or builder.hits or builder.failed or not hasattr(module, "ModelNew"):
        return
    if not _builds_extensions(getattr(module, "__file__", None) or "candidate.py"):
        return
    import torch
    try:
        reference = import_file("problem.py", "kforge_reference")
        torch.random.manual_seed(0)
        with torch.device("cpu"), torch.no_grad():
            module.ModelNew(*list(reference.get_init_inputs()))
    except CompilationError:
        raise
    except BaseException:  # noqa: BLE001 - judged in the run, where the model is built on its device
        pass


def _builds_extensions(path: str) -> bool:
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return False
    return "load_inline" in text or "cpp_extension" in text


@contextlib.contextmanager
def _reporting_the_device(backend):
    """Models often build only ``if torch.cuda.is_available()``; this process hides the GPU, so it says there is
    one while the candidate imports, or such a build would wait for the run, holding the GPU for its minute
    of compiling (seen with published KernelBench kernels). Code that then touches the device fails here and
    is judged in the run."""
    if backend.device != "cuda":
        yield
        return
    import torch
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        yield
    finally:
        torch.cuda.is_available = real


def run(req: RunRequest) -> RunResult:
    """Correctness trials, then timing."""
    return _Run(req).execute()


def audit(req: AuditRequest) -> AuditResult:
    """The problem audit alone: no candidate is involved."""
    return _Run(req).audit_only()


def variants(req: VariantsRequest) -> VariantsResult:
    """The candidate on the problem's shape variants, one correctness trial each (`kforge.verify.variant_checks`)."""
    import torch
    run = _Run(req)
    try:
        with torch.no_grad():
            phase("setup")
            run.setup(flush_l2=False, failed_builds=req.failed_builds)
            run.setup_views()
            phase("reference")
            run.load_reference()
            if run.cfg.audit:
                run.flags = list(run._audit().flags)
            run.guard_candidate()
            phase("shape variants")
            return run.check_variants(req.variants, count_kernels=req.kernels_counted, kernel_share=req.kernel_share,
                                      others=req.others)
    except Exception as exc:  # the harness's own step failed: the machine's load, or the worker's fault
        run.raise_if_busy(exc)
        raise


class _Run(OwnPhases, TimedRounds, Trials):
    """One verification: the problem audit (cached), correctness trials with attribution, then timing."""

    def execute(self) -> RunResult:
        import torch
        self.audit = None
        try:
            with torch.no_grad():
                ended = self._execute()
        except HarnessVerdict as v:
            ended = RunEnd.of(v)
        except Exception as exc:  # the harness's own step failed: the machine's load, or the worker's fault
            self.raise_if_busy(exc)
            raise
        ended, kernelbench = self._in_both_numerics(ended)
        evidence = Evidence(**ended.evidence)
        evidence.notes.extend(self.notes)
        if self.build_log and not evidence.compiler_log:
            evidence.compiler_log = self.build_log
        return RunResult(state=ended.state, message=ended.message, rule=ended.rule, evidence=evidence,
                         work=self.work, trials=self.trials_done, phases=phase_times(), attribution=self.attribution,
                         audit=self.audit, kernelbench=kernelbench, **ended.timings)

    def _in_both_numerics(self, ended: RunEnd) -> tuple[RunEnd, Outcome | None]:
        """A run that went to its end with one view failed (`kforge.verify.numerics`): the kforge view's mismatch
        is the run's state (its timings kept: the other rules count them), the kernelbench view's the other."""
        failed = self.views.failed if hasattr(self, "views") else {}
        kb = failed.get("kernelbench")
        if ended.state == "numerical_mismatch" and kb is not None and kb.message != ended.message:
            # both views failed, each at its own tolerance: the kernelbench rules quote KernelBench's, not kforge's
            return ended, Outcome(state=kb.state, message=kb.message, rule=kb.extra.get("rule"),
                                  mismatch=(kb.extra.get("evidence") or {}).get("mismatch"))
        if ended.state != "correct" or not failed:
            return ended, None
        if "kforge" in failed:
            v = failed["kforge"]
            return (RunEnd(v.state, v.message, v.extra.get("rule"), dict(v.extra.get("evidence") or {}),
                           ended.timings), Outcome(state="correct", message=ended.message))
        v = failed["kernelbench"]
        return ended, Outcome(state=v.state, message=v.message, rule=v.extra.get("rule"),
                              mismatch=(v.extra.get("evidence") or {}).get("mismatch"))

    def audit_only(self) -> AuditResult:
        """The problem audit alone (``kforge problems --audit``): no candidate is involved. With ``baselines``,
        eager and ``torch.compile`` are timed after it as a run times them, minus the candidate (`Verifier.prepare`)."""
        import torch
        try:
            with torch.no_grad():
                self.setup(flush_l2=True)
                self.load_reference()
                self.audit = self._audit()
                if not getattr(self.req, "baselines", False):
                    return AuditResult(audit=self.audit)
                self.begin()
                self.flags = list(self.audit.flags)
                self.guard_candidate()  # the tripwire's baseline, as a run has it when timing starts
                timed = self._time_within_budget(None)
                return AuditResult(audit=self.audit, ref=timed.timings.get("ref"),
                                   compile_ref=timed.timings.get("compile_ref"))
        except HarnessVerdict as v:
            return AuditResult(audit=self.audit, error=v.message, evidence=Evidence(**(v.extra.get("evidence") or {})))

    def _execute(self) -> RunEnd:
        cfg = self.cfg
        self.begin()  # kforge's own phases keep within the run's time limit (`kforge.verify.phases`)
        phase("setup")
        self.setup(flush_l2=cfg.timing.flush_l2, failed_builds=getattr(self.req, "failed_builds", None))
        self.setup_views()
        phase("reference")
        self.load_reference()
        self.audit = None
        if cfg.audit:
            phase("audit")
            self.audit = self._audit()
            self.flags = list(self.audit.flags)
            if "stochastic" in self.flags:
                self.notes.append("the reference is stochastic: torch's RNG is seeded alike before the reference "
                                  "and the candidate, so a candidate drawing from it in the same order can match")
            if self.audit.state:
                self.notes.append(stateful_note(self.audit.state))
        self.reference_alone()
        phase("load")
        model = self.program(self.load_candidate(), own=True)  # its training step in the backward mode
        phase("correctness")
        self.correctness(model)
        self.report()
        if cfg.skip_timing:
            phase("attribution")
            self.measured_within_budget(model)
            return RunEnd("correct", f"matches the reference on {self.trials_done} trials (timing skipped)")
        timed = self._time_within_budget(model)
        self.report(timed.timings)
        phase("attribution")
        self.measured_within_budget(model)
        timed.message = timed.message.replace(f"on {self.cfg.trials} trials", f"on {self.trials_done} trials")
        return timed

    def _audit(self) -> ProblemAudit:
        """The problem audit, from the cache when this problem was audited on this device before."""
        from pathlib import Path

        from . import audit as problem_audit
        path = problem_audit.cache_path(str(Path(self.req.cache_dir).parent), self.problem.source,
                                        self.device_name(), self.torch.__version__,
                                        f"{self.precision.name}{':all' if self.cast_all else ''}")
        try:
            found = ProblemAudit.from_wire(read_json(path)) if path.is_file() else None
        except ProtocolError:  # written by another version: audit again
            found = None
        if found is None:
            try:
                found = problem_audit.run(self)
            except Exception as exc:  # noqa: BLE001 - the reference fails on its own: say so, judge nothing
                self.raise_if_busy(exc)
                raise HarnessVerdict(PROBLEM_ERROR, f"the reference program fails when run on its own "
                                     f"({type(exc).__name__}: {first_line(exc)}); {self.blame()}{self.cast_note(exc)}", evidence={"traceback": self.problem_traceback(exc)})
            write_json(path, found.to_wire())
        return found



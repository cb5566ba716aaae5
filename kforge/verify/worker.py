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
import dataclasses
import os
import traceback
from typing import Any

from ..backends import WorkerContext, from_spec
from ..cachefile import read_json, write_json
from ..sandbox.budget import BudgetSpent, budget, spent
from ..sandbox.progress import candidate_code
from ..sandbox.protocol import ProtocolError
from ..sandbox.harness import (PROBLEM_ERROR, HarnessVerdict, first_line, import_candidate, import_file, phase,
                               phase_times, tail)
from ..sandbox.quiet import take_quiet_lock
from ..sandbox.settings import Swap
from ..sandbox.writeguard import install_write_guard
from .backward import TrainingStep
from .compare import as_outputs
from .phases import OwnPhases
from .protocol import (AuditRequest, AuditResult, BuildRequest, BuildResult, Outcome, ProblemAudit, RunRequest,
                       RunResult, VariantsRequest, VariantsResult)
from .stateful import note as stateful_note
from .timing import Sampler
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
    """The candidate on the problem's shape variants, one correctness trial each (`kforge.verify.variants`)."""
    import torch
    run = _Run(req)
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
        return run.check_variants(req.variants)


@dataclasses.dataclass
class _Ended:
    """How a run ended, before the parts every result carries are added (`_Run.execute`)."""

    state: str
    message: str
    rule: str | None = None
    evidence: dict[str, Any] = dataclasses.field(default_factory=dict)
    timings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``runtime``, ``ref``, ``compile_ref``, ``ref_strict``: `TimingStats` or None."""

    @classmethod
    def of(cls, v: HarnessVerdict) -> "_Ended":
        return cls(v.state, v.message, v.extra.get("rule"), dict(v.extra.get("evidence") or {}))


class _Run(OwnPhases, Trials):
    """One verification: the problem audit (cached), correctness trials with attribution, then timing."""

    def execute(self) -> RunResult:
        import torch
        self.audit = None
        try:
            with torch.no_grad():
                ended = self._execute()
        except HarnessVerdict as v:
            ended = _Ended.of(v)
        ended, kernelbench = self._in_both_numerics(ended)
        evidence = Evidence(**ended.evidence)
        evidence.notes.extend(self.notes)
        if self.build_log and not evidence.compiler_log:
            evidence.compiler_log = self.build_log
        return RunResult(state=ended.state, message=ended.message, rule=ended.rule, evidence=evidence,
                         work=self.work, trials=self.trials_done, phases=phase_times(), attribution=self.attribution,
                         audit=self.audit, kernelbench=kernelbench, **ended.timings)

    def _in_both_numerics(self, ended: _Ended) -> tuple[_Ended, Outcome | None]:
        """A run that went to its end with one view failed (`kforge.verify.numerics`): the kforge view's mismatch
        is the run's state (its timings kept: the other rules count them), the kernelbench view's the other."""
        failed = self.views.failed if hasattr(self, "views") else {}
        if ended.state != "correct" or not failed:
            return ended, None
        if "kforge" in failed:
            v = failed["kforge"]
            return (_Ended(v.state, v.message, v.extra.get("rule"), dict(v.extra.get("evidence") or {}),
                           ended.timings), Outcome(state="correct", message=ended.message))
        v = failed["kernelbench"]
        return ended, Outcome(state=v.state, message=v.message, rule=v.extra.get("rule"),
                              mismatch=(v.extra.get("evidence") or {}).get("mismatch"))

    def audit_only(self) -> AuditResult:
        """The problem audit alone (``kforge problems --audit``): no candidate is involved."""
        import torch
        try:
            with torch.no_grad():
                self.setup(flush_l2=True)
                self.load_reference()
                return AuditResult(audit=self._audit())
        except HarnessVerdict as v:
            return AuditResult(error=v.message, evidence=Evidence(**(v.extra.get("evidence") or {})))

    def _execute(self) -> _Ended:
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
        phase("load")
        model = self.program(self.load_candidate(), own=True)  # its training step in the backward mode
        phase("correctness")
        self.correctness(model)
        self.report()
        if cfg.skip_timing:
            phase("attribution")
            self.measured_within_budget(model)
            return _Ended("correct", f"matches the reference on {self.trials_done} trials (timing skipped)")
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
                raise HarnessVerdict(PROBLEM_ERROR, f"the reference program fails when run on its own "
                                     f"({type(exc).__name__}: {first_line(exc)}); this is a bug in the problem, "
                                     "not in the candidate", evidence={"traceback": tail(traceback.format_exc())})
            write_json(path, found.to_wire())
        return found

    # -- timing ------------------------------------------------------------------------------------
    def _time_within_budget(self, model) -> _Ended:
        """Timing within its budget (`kforge.verify.phases`); cut short, it reports what its rounds measured."""
        try:
            with self.timing_budget() as b:
                return self._time(model)
        except BudgetSpent as exc:
            if not spent(exc, b):
                raise
            if exc.hung:  # its own call had run far longer than its others: the candidate hangs, not kforge
                raise HarnessVerdict("timeout", f"a call of the candidate's forward had run {exc.running_s:.1f} s when "
                                     f"the timing phase's budget ({b.seconds:.3g} s) was spent; none before took over "
                                     f"{exc.longest_s:.2f} s") from None
        self.trip("after timing")
        message, timings = self.cut_short(b)
        return _Ended("correct", message, timings=timings)

    def _time(self, model) -> _Ended:
        torch = self.torch
        phase("waiting for the device")  # the zygote's next child may be making its context on this GPU
        take_quiet_lock()
        phase("timing")
        sets = self._fit_sets(self.cfg.timing.input_sets)
        try:
            return self._timed_rounds(model, sets)
        except _OutOfMemory as oom:
            if sets <= 1:
                raise oom.verdict(self) from None
        # Three input sets did not fit beside the programs' own memory: time with one.
        torch.cuda.empty_cache() if self.device.type == "cuda" else None
        self.notes.append(f"timing ran out of device memory with {sets} input sets; timed with one")
        try:
            return self._timed_rounds(model, 1)
        except _OutOfMemory as oom:
            raise oom.verdict(self) from None

    def _fit_sets(self, wanted: int) -> int:
        """As many input sets (at most ``wanted``) as the device's free memory holds beside the programs."""
        if self.device.type != "cuda" or wanted <= 1 or not self.audit:
            return max(1, wanted)
        free, _ = self.torch.cuda.mem_get_info()
        a = self.audit
        per_set = max(1, a.input_bytes or 1)
        # Each program's forward and output, a recheck's fresh draw, snapshot and expected output.
        reserve = 2 * ((a.peak_bytes or 0) + a.out_bytes) + 3 * per_set
        if self.steps is not None:  # and a training step's backward
            reserve += self.steps.extra_bytes(per_set, a.param_bytes, a.peak_bytes or 0)
        fit = int((free - reserve) // per_set)
        if fit < wanted:
            self.notes.append(f"timing rotates {max(1, fit)} input set(s), not {wanted}: each takes "
                              f"{per_set / 2**30:.2f} GiB and {free / 2**30:.1f} GiB of device memory is free")
        return max(1, min(wanted, fit))

    def _timed_rounds(self, model, n_sets: int) -> _Ended:
        torch, tcfg, clock = self.torch, self.cfg.timing, self.clock
        sets = _oom_guard(torch, "reference", lambda: [self.inputs(self.draw()) for _ in range(n_sets)])
        programs = self._programs(model, sets[0])
        stochastic = "stochastic" in self.flags
        own_streams = bool(getattr(self.req, "own_streams", False))

        def run(label, prog, numerics, inputs, rng_seed):
            with (Swap(self.settings, numerics, timed=True) if numerics else contextlib.nullcontext()):
                if rng_seed is not None:
                    torch.random.manual_seed(rng_seed)
                try:  # the clock flushes L2 itself, right before the start event
                    with candidate_code() if label == "cand" else contextlib.nullcontext():
                        return clock.time(lambda: prog(*inputs), settled=label == "cand" and own_streams)
                except BaseException as exc:  # noqa: BLE001
                    if _is_oom(torch, exc):
                        raise _OutOfMemory("candidate" if label == "cand" else "reference") from None
                    if label != "cand":
                        raise
                    raise self._fail_exception(exc, f"in forward (timing round {rounds})") from None

        rounds = 0
        for _ in range(tcfg.warmup):  # the compile reference warmed up while compiling
            for label, prog, numerics in programs:
                if label != "compile":
                    run(label, prog, numerics, sets[0], self.draw() if stochastic else None)
        clock.sync()
        self.trip("during warm-up")
        self.tripwire.rebaseline_threads()  # torch.compile may have started worker threads of its own
        protected = self._protected_ptrs(sets, model)
        sampler = self._sampler = Sampler([p[0] for p in programs], tcfg, clock.now, self.rounds_deadline(clock.now))
        every = max(1, tcfg.recheck_every)
        while True:
            i = rounds % len(sets)
            rng_seed = self.draw() if stochastic else None
            # Rechecks after rounds every, 2*every, 4*every, ...: a handful per verification, since
            # refilling inputs costs more than a timed call, and the first one already catches a cache.
            k, r = divmod(rounds + 1, every)
            recheck = r == 0 and k & (k - 1) == 0
            expected = snapshot = None
            if recheck:
                # Same buffers, new values: a cache keyed by pointer or shape now returns stale results.
                def refill():
                    for dst, src in zip(sets[i], self.inputs(self.draw())):
                        if isinstance(dst, torch.Tensor):
                            dst.copy_(src)
                    return self.recheck_reference(self._clone(sets[i]), rng_seed), self._clone(sets[i])
                expected, snapshot = _oom_guard(torch, "reference", refill)
            for label, prog, numerics in programs:
                dev_ms, host_ms, out = run(label, prog, numerics, sets[i], rng_seed)
                sampler.add(label, dev_ms, host_ms)
                if label == "cand" and recheck:
                    where = f"timing round {rounds}, fresh inputs"
                    _oom_guard(torch, "comparison", lambda: self._check(
                        self.recheck_outputs(out, snapshot, rng_seed, where), expected, sets[i], snapshot, where))
                _poison(torch, out, protected)
                del out
            rounds += 1
            if recheck:
                self.trip(f"timing round {rounds - 1}")
            if sampler.done(rounds):
                break
        self.trip("after timing")
        self._check_unsynchronized(sampler, own_streams, model, sets[0])
        self.notes.append(f"timing: {rounds} rounds, stopped: {sampler.stop_reason}")
        rechecks = sum(1 for k in range(1, rounds // every + 1) if k & (k - 1) == 0)
        return _Ended("correct", f"matches the reference on {self.cfg.trials} trials and {rechecks} timing rechecks",
                      timings={"runtime": sampler.stats("cand"), "ref": sampler.stats("ref"),
                               "compile_ref": sampler.stats("compile"), "ref_strict": sampler.stats("ref_strict")})

    def _programs(self, model, inputs) -> list[tuple[str, Any, str | None]]:
        """(label, program, numerics) to time: the baselines as people run PyTorch (and the eager reference in
        strict fp32 where that differs), the compile reference warmed up, the candidate as it left things."""
        cfg, torch = self.cfg, self.torch
        numerics = "tf32" if self.precision.name == "tf32" else "default"  # the baselines run in the precision
        if self.steps is not None:
            self.steps.checking = False  # a timed step makes no copies to check in-place writes against
        ref = self.program(self.ref_model)  # in the backward mode, training steps (kforge.verify.backward)
        programs: list[tuple[str, Any, str | None]] = [("ref", ref, numerics)]
        if self.device.type == "cuda" and self.precision.name == "fp32" and self.settings.defaults != \
                self.settings.strict:
            programs.append(("ref_strict", ref, "exact"))
        if cfg.compile_ref:
            phase("compile reference")
            try:
                with budget("compile reference", self.compile_budget_s()) as within:
                    # Compiled and called in the harness's context: a candidate's torch._inductor.config stays its own.
                    isolated = self.settings.isolated
                    compiled = self.program(isolated(isolated(torch.compile)(self.ref_model, mode=cfg.compile_mode)))
                    with Swap(self.settings, numerics, timed=True):
                        for _ in range(max(1, cfg.timing.warmup)):
                            compiled(*inputs)
                        self.clock.sync()
                programs.append(("compile", compiled, numerics))
            except BudgetSpent as exc:
                if not spent(exc, within):
                    raise
                self.notes.append(f"torch.compile of the reference did not finish within its share of the timing "
                                  f"phase's budget ({within.seconds:.3g} s): no compile baseline")
            except Exception as exc:  # noqa: BLE001 - a baseline failing is a note, not the candidate's fault
                self.notes.append(f"torch.compile of the reference failed: {first_line(exc)}")
            phase("timing")
        programs.append(("cand", model, None))
        return programs

    def _check_unsynchronized(self, sampler, own_streams: bool, model, inputs) -> None:
        """Work off the timed stream, judged from a gap that persists when re-timed (`kforge.verify.unsync`)."""
        if self.device.type == "cuda":
            from .unsync import check
            check(self, sampler, own_streams, model, inputs)

    def _protected_ptrs(self, sets, model) -> set[int]:
        torch = self.torch
        ptrs = {x.untyped_storage().data_ptr() for s in sets for x in s if isinstance(x, torch.Tensor)}
        for m in (self.ref_model, model.module if isinstance(model, TrainingStep) else model):
            if isinstance(m, torch.nn.Module):
                ptrs |= {t.untyped_storage().data_ptr() for t in list(m.parameters()) + list(m.buffers())}
        return ptrs


class _OutOfMemory(Exception):
    """The device ran out of memory during timing; ``where`` says whose code asked for it."""

    def __init__(self, where: str):
        super().__init__(where)
        self.where = where

    def verdict(self, run: "_Run") -> HarnessVerdict:
        a = run.audit
        need = (a.input_bytes + a.out_bytes + (a.peak_bytes or 0)) if a else 0
        sized = f" (one input set, its outputs and a forward take {need / 2**30:.1f} GiB)" if need else ""
        if self.where == "candidate":
            return HarnessVerdict("runtime_error", "the candidate ran out of device memory while being timed with a "
                                  f"single input set{sized}; it passed its correctness trials")
        return HarnessVerdict("runtime_error", f"the harness ran out of device memory in the {self.where}{sized}; "
                              "this is the verifier's limit on this device, not the candidate's fault",
                              rule="harness_out_of_memory")


def _is_oom(torch, exc: BaseException) -> bool:
    return isinstance(exc, getattr(torch, "OutOfMemoryError", MemoryError)) or isinstance(exc, MemoryError)


def _oom_guard(torch, where: str, fn):
    try:
        return fn()
    except HarnessVerdict:
        raise
    except BaseException as exc:  # noqa: BLE001
        if _is_oom(torch, exc):
            raise _OutOfMemory(where) from None
        raise


def _poison(torch, out, protected: set[int]) -> None:
    """NaN-fill an output before it is freed, so the next allocation of that memory holds no result."""
    for t in as_outputs(out):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and type(t) is torch.Tensor \
                and t.untyped_storage().data_ptr() not in protected:
            t.fill_(float("nan"))


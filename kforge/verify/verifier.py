"""`Verifier`: static checks → build (CPU pool) → run (device slot) → `Facts` → `Verdict`.

The caller's process never executes candidate code: it parses it, and hands it to worker processes. Each
step that can end a verification gives its `Facts`; `kforge.verify.conclude` turns them into the verdict,
once. The requests and what comes back are `kforge.verify.protocol`'s dataclasses.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..backends import Backend, get_backend
from ..backends.diagnose import cause_in
from ..candidate import Candidate, own_seed_hint, split_program_hint
from ..errors import KforgeError
from ..precision import get_precision
from ..problems import Problem, ProblemError
from ..sandbox.gpus import arch_of
from ..sandbox.harness import PROBLEM_ERROR
from ..sandbox.pool import WorkerLost, WorkerPool
from ..sandbox.protocol import Reply, Request
from .build_memo import BuildMemo
from .busy import retry_while_busy
from .compile_ref import CompileRefs, KeptRef
from .conclude import Facts, Subject, conclude
from .config import VerifyConfig
from .protocol import (
    AuditRequest,
    BuildRequest,
    BuildResult,
    Outcome,
    ProblemAudit,
    RunRequest,
    RunResult,
    VariantsRequest,
)
from .roofline import roofline
from .static import StaticConfig, check
from .static_rules import own_streams
from .unfinished import established, forged, no_result, unmeasured
from .variants import shape_variants
from .verdict import Evidence, Facets, State, Verdict

#: Static rules whose question (did the candidate's kernels do the work?) the run answers by measurement.
MEASURED = frozenset({"no_kernel", "kernel_not_called", "try_fallback", "forbidden_op"})


class BackendUnavailable(KforgeError, RuntimeError):
    """The backend needs a device this machine does not have; the message says what to do."""


class ProblemFails(ProblemError):
    """The problem itself fails when run (its ``Model``, ``get_inputs`` or ``get_init_inputs``): no candidate is
    judged. A `ProblemError`, as a malformed problem file is: callers that skip or report bad problems catch both."""

    def __init__(self, message: str, traceback: str | None = None):
        super().__init__(message + (f"\n--- the problem's traceback ---\n{traceback.rstrip()}" if traceback else ""))
        self.traceback = traceback


#: Said where the kforge rules found no other shape to check: a correct verdict there says nothing about other sizes.
NO_VARIANTS = ("no shape variants: kforge found no sizes in the problem to vary (module-level integers named like "
               "sizes, batch_size = 128 or dim: int = 4096, shapes written as tuples of them, literal sizes in "
               "get_inputs or get_init_inputs; not sizes inside a dict or a class), so the candidate was checked at "
               "this shape alone "
               "(KFORGE = {\"variants\": [{...}]} in the problem lists some)")
DECLARED_NONE = ("no shape variants: the problem declares none (KFORGE[\"variants\"] = []), so the candidate was "
                 "checked at this shape alone")


class Verifier:
    """Verifies candidates; owns a `WorkerPool` unless given one. Thread-safe."""

    def __init__(self, config: VerifyConfig | None = None, pool: WorkerPool | None = None,
                 static: StaticConfig | None = None):
        self.config = config or VerifyConfig()
        self.static = static
        """Static rules for every call, replacing the `VerifyConfig`'s ``static`` (None: each call's
        config decides); whether a kernel is required always comes from each call's `VerifyConfig`."""
        self._own_pool = pool is None
        self.pool = pool or WorkerPool()
        self.compile_refs = CompileRefs(Path(self.pool.build_cache).parent / "compile_ref")
        self.build_memo = BuildMemo(Path(self.pool.build_cache).parent / "build_memo")
        self._lock = threading.Lock()
        self.time_s: dict[str, float] = {}
        """Seconds spent, over all calls, in each section of a verification as the caller sees it:
        ``checks`` (static rules, device lookups), ``build`` and ``run`` (pool requests, waits included),
        ``after`` (reading the reply, the roofline floor)."""

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------------
    def device_kinds(self, backend: Backend) -> list[str]:
        kinds = self.pool.kinds_for(backend.device)
        if not kinds:
            raise BackendUnavailable(
                f"the {backend.name} backend runs on a CUDA GPU and none is visible here; use `--backend cpu`, "
                f"or `--backend triton --device cpu` for Triton's interpreter")
        return kinds

    def arch(self, backend: Backend, kinds: list[str]) -> str | None:
        """TORCH_CUDA_ARCH_LIST for builds: every distinct arch among the GPUs a candidate may land on."""
        if backend.device != "cuda":
            return None
        archs = sorted({arch_of(i.capability) for i in (self.pool.device_info(k, backend.spec()) for k in kinds)
                        if i.capability})
        return ";".join(archs) or None

    def verify(self, problem: Problem, candidate: Candidate | str, backend: Backend | str,
               config: VerifyConfig | None = None) -> Verdict:
        cfg = config or self.config
        backend = get_backend(backend)
        if not backend.measures_speed and not cfg.skip_timing:
            # Triton's interpreter: its baselines and "speedups" measured nothing, and its torch.compile ratio,
            # kept for the problem, was then reused by the cpu backend (a ReLU read 198x against compile)
            cfg = replace(cfg, skip_timing=True)
        if isinstance(candidate, str):
            candidate = Candidate.from_source(candidate)
        start = time.monotonic()
        facts = self._facts(problem, candidate, backend, cfg)
        if hint := split_program_hint(candidate.reply, candidate.source, facts.message) or \
                own_seed_hint(candidate.source, facts.facets.outcome):
            facts = replace(facts, message=facts.message + hint)
        return conclude(facts, cfg, Subject(problem.key, backend.name, candidate.hash, time.monotonic() - start))

    def start_workers(self, *backends: Backend | str, build: bool = True, devices: bool = True) -> threading.Thread:
        """Boot the build workers and every device worker of these backends in the background, all at once;
        the first requests wait for them as they would otherwise, and a device's no longer waits for the
        build's (each worker imports torch and its compiler stack). ``build=False`` leaves the build workers
        to start on first use (a verification whose build is remembered needs none: `builds_known`)."""
        found = {k for b in backends for k in self.device_kinds(get_backend(b))} if devices else set()
        kinds = (["build"] if build else []) + sorted(found)
        thread = threading.Thread(target=self.pool.start, args=(kinds,), daemon=True, name="kforge-boot")
        thread.start()
        return thread

    def build_known(self, problem: Problem, candidate: Candidate, backend: Backend | str) -> bool:
        """Whether verifying this program will skip its build phase (built cleanly before: `BuildMemo`), as far as
        can be told without waiting for a worker (the device's arch must be known from an earlier probe)."""
        backend = get_backend(backend)
        if candidate.source is None:
            return True
        kinds = self.device_kinds(backend)
        infos = [self.pool.known_device_info(k) for k in kinds]
        if backend.device == "cuda" and not all(infos):
            return False
        archs = sorted({arch_of(i.capability) for i in infos if i and i.capability}) if backend.device == "cuda" else []
        request = BuildRequest(backend=backend.spec(), arch=";".join(archs) or None)
        files = {"problem.py": problem.source, "candidate.py": candidate.source}
        return self.build_memo.get(self.build_memo.key(request, files)) is not None

    def audit(self, problem: Problem, backend: Backend | str) -> ProblemAudit:
        """The problem's audit on this backend's device (cached on disk per problem, size and device):
        ``flags`` (stochastic, degenerate, launch_bound), ``ref_ms``, ``flops``, ``bytes``, memory."""
        backend = get_backend(backend)
        kinds = self.device_kinds(backend)
        request = AuditRequest(problem=problem, backend=backend.spec(), config=self.config.to_dict(),
                               arch=self.arch(backend, kinds))
        reply = self._request_retrying(kinds, request, {"problem.py": problem.source}, self.config.timeout_s,
                                       self.config.device_busy_wait_s)
        found = reply.result
        if found is None or found.audit is None:
            why = (found.error if found else None) or reply.error or ("timed out" if reply.timed_out else "")
            raise RuntimeError(f"auditing {problem.key} failed: {why or reply.output_tail}")
        return found.audit

    def prepare(self, problem: Problem, backend: Backend | str, config: VerifyConfig | None = None) -> bool:
        """The problem's audit and its baselines' timings (eager and ``torch.compile``) ahead of any candidate, so
        that a verification asked for meanwhile finds them (the audit cached on disk, the compile reference kept:
        `CompileRefs`) instead of spending its run on them. A one-shot ``kforge verify`` calls it while the
        candidate builds. Whether it kept a compile reference; a failure is left for the run to meet and report.
        A run waits for it once it has claimed the problem's key (after the device worker is up)."""
        cfg = config or self.config
        backend = get_backend(backend)
        kinds = self.device_kinds(backend)
        key = self._ref_key(problem, backend, kinds, cfg)
        if not key or cfg.backward or self.compile_refs.known(key) or not self.compile_refs.claim(key):
            return False
        try:
            request = AuditRequest(problem=problem, backend=backend.spec(), config=cfg.to_dict(),
                                   arch=self.arch(backend, kinds), baselines=True)
            found = self.pool.request(kinds, request, {"problem.py": problem.source}, cfg.timeout_s).result
            if found is None or found.ref is None or found.compile_ref is None:
                return False
            self.compile_refs.keep(key, found.compile_ref, found.ref, ahead=True)
            return True
        except Exception:  # noqa: BLE001 - ahead of time only: the run meets the failure again and says so
            return False
        finally:
            self.compile_refs.release(key)

    def _ref_key(self, problem: Problem, backend: Backend, kinds: list[str], cfg: VerifyConfig) -> str | None:
        """The kept compile reference's key: for the one device model these slots have (None: several)."""
        devices = {self.pool.device_info(k, backend.spec()).device for k in kinds}
        return self.compile_refs.key(problem, devices.pop() if len(devices) == 1 else None, cfg, backend.worker_env())

    def _request_retrying(self, kinds: list[str], request: Request, files: dict[str, str], timeout: float,
                          busy_wait_s: float = 0.0) -> Reply:
        """A lost worker (its process died under the candidate: a crash in the driver, a lost GPU, or the
        candidate killing it) is retried once, on another device where there is one; a second loss raises. A run
        whose device memory other processes held is tried again for up to ``busy_wait_s`` (`retry_while_busy`)."""
        def ask(where: list[str]) -> Reply:
            try:
                return self.pool.request(where, request, files, timeout)
            except WorkerLost as exc:
                return self.pool.request([k for k in where if k != exc.kind] or where, request, files, timeout)
        return retry_while_busy(ask, kinds, busy_wait_s)

    # -- the steps -----------------------------------------------------------------------------------
    def _facts(self, problem: Problem, candidate: Candidate, backend: Backend, cfg: VerifyConfig) -> Facts:
        if candidate.source is None:
            return Facts.ended(State.GENERATION_FAILURE, candidate.error or "no usable code")
        clock = _Sections(self)
        kinds = self.device_kinds(backend)
        findings, soft = self._static(problem, candidate, backend, cfg)
        denied = [f for f in findings if f.severity == "deny"]
        evidence = Evidence(findings=[f.to_dict() for f in findings])
        if denied:
            return Facts.ended(State.CHEAT_DETECTED, denied[0].message, denied[0].rule, evidence=evidence)
        files = {"problem.py": problem.source, "candidate.py": candidate.source}
        arch = self.arch(backend, kinds)
        ref_key = self._ref_key(problem, backend, kinds, cfg)
        clock("checks")
        build, ended = self._build(BuildRequest(backend=backend.spec(), arch=arch), files, evidence, cfg)
        clock("build")
        if ended is not None:
            return ended
        known = self.compile_refs.known(ref_key, wait=True)  # after the build: `prepare` may have timed it meanwhile
        request = RunRequest(problem=problem, backend=backend.spec(), config=replace(cfg, compile_ref=False).to_dict()
                             if known else cfg.to_dict(), arch=arch, own_streams=own_streams(candidate.source),
                             failed_builds=build["failed_builds"])
        info = {k: v for k, v in build.items() if k != "failed_builds"}
        try:  # any free device runs it
            reply = self._request_retrying(kinds, request, files, cfg.timeout_s, cfg.device_busy_wait_s)
        except WorkerLost as exc:
            return Facts.ended(State.RUNTIME_ERROR, f"the worker process died twice under this candidate: {exc}",
                               build=info)
        clock("run")
        if reply.result is None:
            device = self.pool.device_info(reply.slot, backend.spec()).device
            return replace(established(reply, cfg, soft, findings, device) or no_result(reply, cfg), build=info)
        facts = self._ran(problem, backend, reply, reply.result, known, ref_key, soft, findings, info, cfg)
        shapes = shape_variants(problem, problem.variants) if cfg.variants else []
        if shapes and facts.facets.outcome == State.CORRECT.value:
            clock("after")
            facts = self._on_variants(facts, VariantsRequest(
                problem=problem, backend=backend.spec(), config=cfg.to_dict(), arch=arch, variants=shapes,
                failed_builds=request.failed_builds, kernels_counted=cfg.require_kernel and bool(
                    facts.attribution and facts.attribution.kernel_calls),
                kernel_share=facts.attribution.kernel_share if facts.attribution else None,
                others=[u.name for u in facts.attribution.top if u.origin != "candidate"] if facts.attribution else []),
                kinds, files, cfg)
            clock("variants")
        else:
            clock("after")
            if cfg.variants and facts.facets.outcome == State.CORRECT.value:
                note = NO_VARIANTS if problem.variants is None else DECLARED_NONE
                facts = replace(facts, evidence=replace(facts.evidence, notes=facts.evidence.notes + [note]))
        return facts

    def _on_variants(self, facts: Facts, request: VariantsRequest, kinds: list[str], files: dict[str, str],
                     cfg: VerifyConfig) -> Facts:
        """The candidate on the problem's shape variants, in a process of its own: a crash there costs only the
        kforge rules' verdict (`kforge.verify.variants`)."""
        try:
            reply = self._request_retrying(kinds, request, files, cfg.timeout_s, cfg.device_busy_wait_s)
        except WorkerLost as exc:
            return facts.with_variants(Outcome(state=State.RUNTIME_ERROR.value, message=f"on the shape variants: the "
                                          f"worker process died twice under this candidate: {exc}"))
        r = reply.result
        if r is None:
            ended = no_result(reply, cfg)
            return facts.with_variants(Outcome(state=ended.facets.outcome, message=f"on the shape variants: {ended.message}"))
        notes = [f"correct on shape variant(s) {'; '.join(r.checked)}"] if r.checked else []
        notes += [f"shape variant {s} skipped" for s in r.skipped]
        facts = replace(facts, evidence=replace(facts.evidence, notes=facts.evidence.notes + notes))
        return facts.with_variants(r.failure or Outcome(state=State.CORRECT.value))

    def _static(self, problem: Problem, candidate: Candidate, backend: Backend,
                cfg: VerifyConfig) -> tuple[list, list[dict[str, Any]]]:
        """The static rules' findings, and those about whose code does the work ("soft"): those never reject
        before the run, which measures that question (or, unmeasured, lets the rule sets weigh the finding)."""
        static = replace(self.static or cfg.static, require_kernel=cfg.require_kernel)
        findings = check(candidate.source, backend, problem, static, cfg.precision)
        soft = []
        for f in findings:
            if cfg.require_kernel and f.rule in MEASURED and f.severity == "deny":
                f.severity = "warn"
                soft.append(f.to_dict())
        return findings, soft

    def _build(self, request: BuildRequest, files: dict[str, str], evidence: Evidence,
               cfg: VerifyConfig) -> tuple[dict[str, Any], Facts | None]:
        """The build phase in a CPU worker: what it built (with the ``failed_builds`` the run is to fail at
        once), and the facts when it ends the verification. A program built cleanly before skips it
        (`kforge.verify.build_memo`)."""
        key = self.build_memo.key(request, files)
        if (known := self.build_memo.get(key)) is not None:
            info = {"built": [], "cached": known.cached, "seconds": 0.0, "remembered": True}
            return dict(info, failed_builds={}), None
        try:
            reply = self._request_retrying(["build"], request, files, cfg.build_timeout_s)
        except WorkerLost as exc:
            return {}, Facts.ended(State.COMPILATION_FAILURE, f"the build process died twice under this candidate: "
                                   f"{exc}")
        if reply.forged:  # the candidate's module-level code runs in the build worker too
            return {}, forged(reply)
        if reply.timed_out:
            return {}, Facts.ended(State.TIMEOUT, f"building the candidate took longer than {cfg.build_timeout_s:g} s",
                                   evidence=Evidence(output_tail=reply.output_tail or None))
        r = reply.result or BuildResult()
        info: dict[str, Any] = {"built": r.built, "cached": r.cached, "seconds": round(reply.wall_s, 3)}
        if r.failed:  # builds the candidate caught failing: the run fails them at once instead of compiling again
            info["failed"] = len(r.failed)
        built = dict(info, failed_builds=dict(r.failed))
        if r.refused_write:  # see kforge.sandbox.writeguard
            return built, Facts.ended(State.CHEAT_DETECTED, f"{r.refused_write} (while building)", "environment",
                                      evidence=evidence, build=info)
        if r.compile_error:
            cause = cause_in(r.compile_error)
            if cause is None and r.compile_error.startswith("Python syntax error"):  # the line says it all
                cause = r.compile_error.splitlines()[0]
            return built, Facts.ended(State.COMPILATION_FAILURE, "the candidate does not build"
                                      + (f": {cause}" if cause else ""),
                                      evidence=Evidence(compiler_log=r.compile_error), build=info)
        if not reply.forged and not reply.error:
            self.build_memo.put(key, r)
        return built, None

    def _ran(self, problem: Problem, backend: Backend, reply: Reply, r: RunResult, known: KeptRef | None,
             ref_key: str | None, soft: list[dict[str, Any]], findings: list, build: dict[str, Any],
             cfg: VerifyConfig) -> Facts:
        """The facts of a run that replied: its outcome and evidence, the kept compile reference, speed of light
        and the faster-than-physics check, and the static rules' word on the work where the run measured none."""
        if r.state == PROBLEM_ERROR:
            raise ProblemFails(f"{problem.key}: {r.message}", traceback=r.evidence.traceback)
        notes = list(r.evidence.notes)
        compile_ref = r.compile_ref
        if known and r.runtime:
            compile_ref = known.scaled(r.ref)
            notes.append(known.note)
        elif ref_key and compile_ref:
            self.compile_refs.keep(ref_key, compile_ref, r.ref)
        outcome, outcome_rule, message = r.state, r.rule, r.message
        kb = r.kernelbench
        flags = list(r.audit.flags) if r.audit else []
        floor = None
        if r.runtime and State.CORRECT.value in (outcome, kb.state if kb else None):
            found = roofline(problem, r.audit, r.runtime.median_ms, backend.device,
                             lambda fresh: self.pool.ceilings(reply.slot, backend.spec(), fresh=fresh),
                             get_precision(cfg.precision))
            floor = found.floor_ms
            notes += [found.note] if found.note else []
            if found.too_fast:  # an integrity finding: it holds under every rule set
                outcome, outcome_rule, message = State.CHEAT_DETECTED.value, "faster_than_roofline", found.too_fast
                kb = None
        work = r.work
        if work is None and soft:  # nothing measured whose code did the work: the static rules say it instead
            work = unmeasured(soft[0])
        facets = Facets(outcome=outcome, outcome_rule=outcome_rule, kernel_share=r.attribution.kernel_share
                        if r.attribution else None, **({} if work is None else work.to_wire()),
                        **({} if kb is None else {"kb_outcome": kb.state, "kb_rule": kb.rule,
                                                  "kb_message": kb.message}))
        evidence = replace(r.evidence, output_tail=r.evidence.output_tail or reply.output_tail or None, notes=notes,
                           findings=r.evidence.findings or [f.to_dict() for f in findings])
        if cfg.rules == "kernelbench" and kb is not None and kb.mismatch:  # its message's own mismatch beside it
            evidence = replace(evidence, mismatch=kb.mismatch)
        return Facts(facets, message, evidence, device=self.pool.device_info(reply.slot, backend.spec()).device,
                     trials=r.trials, phases=r.phases, attribution=r.attribution, runtime=r.runtime, ref=r.ref,
                     compile_ref=compile_ref, ref_strict=r.ref_strict, problem_flags=flags, floor_ms=floor,
                     build=build)


class _Sections:
    """Adds the seconds since the last call to the verifier's ``time_s[name]``."""

    def __init__(self, verifier: "Verifier"):
        self.verifier, self.last = verifier, time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        with self.verifier._lock:
            self.verifier.time_s[name] = self.verifier.time_s.get(name, 0.0) + now - self.last
        self.last = now

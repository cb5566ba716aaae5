"""`Verifier`: static checks → build (CPU pool) → run (device slot) → `Verdict`.

The caller's process never executes candidate code: it parses it, and hands it to worker processes.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from ..backends import Backend, get_backend
from ..candidate import Candidate
from ..errors import KforgeError
from ..problems import Problem, ProblemError
from ..cachefile import read_json, write_json
from ..sandbox.ceilings import CPU_FLOOR_MIN_BYTES, floor_ms
from ..sandbox.gpus import arch_of
from ..sandbox.harness import PROBLEM_ERROR
from ..sandbox.pool import WorkerLost, WorkerPool
from .config import VerifyConfig
from .static import StaticConfig, check
from .rules import decide_all
from .static_rules import own_streams
from .verdict import Attribution, Evidence, Facets, State, TimingStats, Verdict, Work


#: A compile-reference median kept on disk is timed anew after this long (drivers, clocks and the machine move on).
COMPILE_REF_MAX_AGE_S = 7 * 24 * 3600

#: Static rules whose question (did the candidate's kernels do the work?) the run answers by measurement.
MEASURED = frozenset({"no_kernel", "kernel_not_called", "try_fallback", "forbidden_op"})


@dataclass
class _KeptRef:
    """A compile-reference timing kept on disk with the eager median timed beside it. Another process runs
    on a machine that may be busier or quieter than then: the ratio to eager carries over, the time does not."""

    stats: TimingStats
    eager_ms: float

    def scaled(self, eager: TimingStats | None) -> TimingStats:
        k = eager.median_ms / self.eager_ms if eager and eager.median_ms > 0 else 1.0
        s = self.stats
        return replace(s, median_ms=s.median_ms * k, mean_ms=s.mean_ms * k, std_ms=s.std_ms * k, min_ms=s.min_ms * k,
                       host_median_ms=s.host_median_ms * k if s.host_median_ms is not None else None)


class BackendUnavailable(KforgeError, RuntimeError):
    """The backend needs a device this machine does not have; the message says what to do."""


class ProblemFails(ProblemError):
    """The problem itself fails when run (its ``Model``, ``get_inputs`` or ``get_init_inputs``): no candidate is
    judged. A `ProblemError`, as a malformed problem file is: callers that skip or report bad problems catch both."""

    def __init__(self, message: str, traceback: str | None = None):
        super().__init__(message + (f"\n--- the problem's traceback ---\n{traceback.rstrip()}" if traceback else ""))
        self.traceback = traceback


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
        self._compile_refs: dict[str, _KeptRef] = {}  # see VerifyConfig.compile_ref_reuse
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
        archs = sorted({arch_of(i["capability"]) for i in (self.pool.device_info(k, backend.spec()) for k in kinds)
                        if i.get("capability")})
        return ";".join(archs) or None

    def verify(self, problem: Problem, candidate: Candidate | str, backend: Backend | str,
               config: VerifyConfig | None = None) -> Verdict:
        cfg = config or self.config
        backend = get_backend(backend)
        if isinstance(candidate, str):
            candidate = Candidate.from_source(candidate)
        start = time.monotonic()
        verdict = self._verify(problem, candidate, backend, cfg)
        verdict.problem, verdict.backend = problem.key, backend.name
        verdict.source_hash = candidate.hash
        verdict.wall_s = time.monotonic() - start
        return verdict

    def start_workers(self, *backends: Backend | str) -> threading.Thread:
        """Boot the build workers and every device worker of these backends in the background, all at once;
        the first requests wait for them as they would otherwise, and a device's no longer waits for the
        build's (each worker imports torch and its compiler stack)."""
        devices = {k for b in backends for k in self.device_kinds(get_backend(b))}
        kinds = ["build"] + sorted(devices)
        thread = threading.Thread(target=self.pool.start, args=(kinds,), daemon=True, name="kforge-boot")
        thread.start()
        return thread

    def audit(self, problem: Problem, backend: Backend | str) -> dict[str, Any]:
        """The problem's audit on this backend's device (cached on disk per problem, size and device):
        ``flags`` (stochastic, degenerate, launch_bound), ``ref_ms``, ``flops``, ``bytes``, memory."""
        backend = get_backend(backend)
        kinds = self.device_kinds(backend)
        request = {"kind": "audit", "problem": problem.to_dict(), "backend": backend.spec(),
                   "config": self.config.to_dict(), "arch": self.arch(backend, kinds)}
        reply = self._request_retrying(kinds, request, {"problem.py": problem.source}, self.config.timeout_s)
        result = reply.get("result") or {}
        if reply.get("timed_out") or reply.get("error") or "audit" not in result:
            raise RuntimeError(f"auditing {problem.key} failed: {result.get('error') or reply.get('error') or reply}")
        return result["audit"]

    def _request_retrying(self, kinds: list[str], payload: dict[str, Any], files: dict[str, str],
                          timeout: float) -> dict[str, Any]:
        """A lost worker (its process died under the candidate: a crash in the driver, a lost GPU, or the
        candidate killing it) is retried once, on another device where there is one; a second loss raises."""
        try:
            return self.pool.request(kinds, payload, files, timeout)
        except WorkerLost as exc:
            others = [k for k in kinds if k != exc.kind] or kinds
            return self.pool.request(others, payload, files, timeout)

    def _verify(self, problem: Problem, candidate: Candidate, backend: Backend, cfg: VerifyConfig) -> Verdict:
        if candidate.source is None:
            return self._decided(Verdict(State.GENERATION_FAILURE, candidate.error or "no usable code"), cfg)
        clock = _Sections(self)
        kinds = self.device_kinds(backend)
        findings, soft = self._static(problem, candidate, backend, cfg)
        denied = [f for f in findings if f.severity == "deny"]
        if denied:
            return self._decided(Verdict(State.CHEAT_DETECTED, denied[0].message, rule=denied[0].rule,
                                         evidence=Evidence(findings=[f.to_dict() for f in findings])), cfg)
        files = {"problem.py": problem.source, "candidate.py": candidate.source}
        ref_key = self._compile_ref_key(problem, backend, kinds, cfg)
        known_ref, ref_note = self._known_compile_ref(ref_key)
        run_cfg = replace(cfg, compile_ref=False) if known_ref else cfg
        request = {"problem": problem.to_dict(), "backend": backend.spec(), "config": run_cfg.to_dict(),
                   "arch": self.arch(backend, kinds), "soft_findings": soft,
                   "own_streams": own_streams(candidate.source)}
        clock("checks")
        early, build_info = self._build(request, files, findings, cfg)
        clock("build")
        if early is not None:
            return self._decided(early, cfg)
        try:  # any free device runs it
            reply = self._request_retrying(kinds, dict(request, kind="run"), files, cfg.timeout_s)
        except WorkerLost as exc:
            return self._decided(Verdict(State.RUNTIME_ERROR, f"the worker process died twice under this "
                                         f"candidate: {exc}", build=build_info), cfg)
        clock("run")
        kind = reply.get("kind") or kinds[0]
        verdict = self._from_reply(reply, cfg, problem)
        verdict.device = self.pool.device_info(kind, backend.spec()).get("device", kind)
        verdict.build = build_info
        if findings and not verdict.evidence.findings:
            verdict.evidence.findings = [f.to_dict() for f in findings]
        if known_ref and verdict.runtime:
            verdict.compile_ref = known_ref.scaled(verdict.ref)
            verdict.evidence.notes.append(ref_note)
        elif ref_key and verdict.compile_ref:
            self._keep_compile_ref(ref_key, verdict.compile_ref, verdict.ref)
        audit = (reply.get("result") or {}).get("audit") or {}
        verdict.problem_flags = list(audit.get("flags") or [])
        declared = bool(problem.flops or problem.bytes)
        if verdict.runtime and verdict.facets and verdict.facets.outcome == State.CORRECT.value \
                and (declared or audit.get("bytes")):
            self._roofline(verdict, problem, audit, declared, kind, backend)
        if verdict.facets and verdict.facets.work is None and soft:
            f = soft[0]  # nothing measured whose code did the work: the static rules say it instead
            verdict.facets.work, verdict.facets.work_rule = Work.NONE, f["rule"]
            verdict.facets.work_message = f"{f['message']} (the run could not measure it)"
        clock("after")
        return self._decided(verdict, cfg)

    def _static(self, problem: Problem, candidate: Candidate, backend: Backend,
                cfg: VerifyConfig) -> tuple[list, list[dict[str, Any]]]:
        """The static rules' findings, and those about whose code does the work ("soft"): those never reject
        before the run, which measures that question (or, unmeasured, lets the rule sets weigh the finding)."""
        static = replace(self.static or cfg.static, require_kernel=cfg.require_kernel)
        findings = check(candidate.source, backend, problem, static)
        soft = []
        for f in findings:
            if cfg.require_kernel and f.rule in MEASURED and f.severity == "deny":
                f.severity = "warn"
                soft.append(f.to_dict())
        return findings, soft

    def _build(self, request: dict[str, Any], files: dict[str, str], findings: list,
               cfg: VerifyConfig) -> tuple[Verdict | None, dict[str, Any] | None]:
        """The build phase in a CPU worker: a verdict when it ends the verification, and what it built."""
        try:
            build = self._request_retrying(["build"], dict(request, kind="build"), files, cfg.build_timeout_s)
        except WorkerLost as exc:
            return Verdict(State.COMPILATION_FAILURE, f"the build process died twice under this candidate: {exc}"), None
        if build.get("forged"):  # the candidate's module-level code runs in the build worker too
            return _forged(build), None
        if build.get("timed_out"):
            return Verdict(State.TIMEOUT, f"building the candidate took longer than {cfg.build_timeout_s:g} s",
                           evidence=Evidence(output_tail=build.get("output_tail"))), None
        result = build.get("result") or {}
        info = {"built": result.get("built", []), "cached": result.get("cached", []),
                "seconds": round(build.get("wall_s", 0.0), 3)}
        failed = result.get("failed") if isinstance(result.get("failed"), dict) else {}
        if failed:  # builds the candidate caught failing: the run fails them at once instead of compiling again
            info["failed"] = len(failed)
            request["failed_builds"] = {str(k): str(v) for k, v in failed.items()}
        if result.get("refused_write"):  # see kforge.sandbox.writeguard
            return Verdict(State.CHEAT_DETECTED, f"{result['refused_write']} (while building)", rule="environment",
                           evidence=Evidence(findings=[f.to_dict() for f in findings]), build=info), info
        if result.get("compile_error"):
            return Verdict(State.COMPILATION_FAILURE, "the candidate does not build",
                           evidence=Evidence(compiler_log=result["compile_error"]), build=info), info
        return None, info

    def _decided(self, verdict: Verdict, cfg: VerifyConfig) -> Verdict:
        """The state under every rule set, from the verdict's facets; ``state`` under the configured one."""
        if verdict.facets is None:  # ended before a run: its state is the outcome
            verdict.facets = Facets(outcome=verdict.state.value, outcome_rule=verdict.rule)
        decisions = decide_all(verdict.facets, cfg.require_kernel, cfg.min_kernel_share)
        chosen = decisions[cfg.rules]
        verdict.rules = cfg.rules
        verdict.states = {name: d.state.value for name, d in decisions.items()}
        verdict.state, verdict.rule = chosen.state, chosen.rule
        if chosen.message:
            verdict.message = chosen.message
        return verdict

    def _roofline(self, verdict: Verdict, problem: Problem, audit: dict[str, Any], declared: bool, kind: str,
                  backend: Backend) -> None:
        """Speed of light, and the faster-than-physics check.

        Measured ceilings are what the hardware reaches; 20% under the floor is not a kernel, it is a trick,
        unless the cached ceilings read low (measured while the device was shared): measure them again first.
        A problem without declared FLOPs/bytes gets them from its audit, for speed of light; its check uses the
        one part no implementation can skip, writing the outputs, and a degenerate problem gets none.
        """
        measured = problem if declared else replace(problem, flops=audit.get("flops"), bytes=audit.get("bytes"))
        if backend.device == "cpu" and (measured.bytes or 0) < CPU_FLOOR_MIN_BYTES:
            return  # no floor is claimed on a CPU for data that fits its caches: do not measure the ceilings
        bound = problem if declared else replace(problem, flops=None, bytes=audit.get("out_bytes"))
        median = verdict.runtime.median_ms
        floor = [None]

        def too_fast(fresh: bool) -> bool:
            ceilings = self.pool.ceilings(kind, backend.spec(), fresh=fresh)
            verdict.floor_ms = floor_ms(measured, ceilings, backend.device)
            floor[0] = floor_ms(bound, ceilings, backend.device) if "degenerate" not in verdict.problem_flags else None
            return bool(floor[0] and median < 0.8 * floor[0])

        if too_fast(fresh=False) and too_fast(fresh=True):  # an integrity finding: it holds under every rule set
            verdict.facets.outcome, verdict.facets.outcome_rule = State.CHEAT_DETECTED.value, "faster_than_roofline"
            verdict.state, verdict.rule = State.CHEAT_DETECTED, "faster_than_roofline"
            verdict.message = (f"{median:.4f} ms is faster than the problem's roofline floor allows on this device "
                               f"({floor[0]:.4f} ms from {'its declared FLOPs and bytes' if declared else 'writing its outputs once'})")
        if not declared and verdict.floor_ms:
            verdict.evidence.notes.append("speed of light from the audit's FLOPs (matrix products and convolutions) "
                                          "and bytes (inputs and parameters read once, outputs written once)")

    def _compile_ref_key(self, problem: Problem, backend: Backend, kinds: list[str], cfg: VerifyConfig) -> str | None:
        """Same problem (source and sizes), same GPU model on every device it may land on, same timing."""
        if not (cfg.compile_ref and cfg.compile_ref_reuse and not cfg.skip_timing):
            return None
        devices = {self.pool.device_info(k, backend.spec()).get("device") for k in kinds}
        if len(devices) != 1:
            return None
        blob = json.dumps([problem.to_dict(), devices.pop(), metadata.version("torch"), cfg.compile_mode,
                           cfg.to_dict()["timing"]], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _compile_ref_path(self, key: str) -> Path:
        return Path(self.pool.build_cache).parent / "compile_ref" / f"{key[:32]}.json"

    def _known_compile_ref(self, key: str | None) -> tuple[_KeptRef | None, str]:
        """A median timed earlier: in this process, or in another one on this machine (on disk), so that a
        one-shot ``kforge verify`` need not compile the reference again, nor even import the compiler."""
        if not key:
            return None, ""
        with self._lock:
            known = self._compile_refs.get(key)
        if known:
            return known, ("torch.compile reference: its time relative to eager as timed in this problem's first "
                           "verification on this device model, scaled to this verification's eager median "
                           "(verify.compile_ref_reuse)")
        entry = read_json(self._compile_ref_path(key))
        if not entry or time.time() - entry.get("at", 0) > COMPILE_REF_MAX_AGE_S:
            return None, ""
        try:
            kept = _KeptRef(TimingStats(**entry["stats"]), float(entry["eager_ms"]))
        except (KeyError, TypeError, ValueError):
            return None, ""
        when = datetime.fromtimestamp(entry["at"], timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return kept, (f"torch.compile reference: its time relative to eager as timed for this problem on this "
                      f"device and torch on {when}, scaled to this verification's eager median (kept in "
                      f"{self._compile_ref_path(key).parent}; verify.compile_ref_reuse=false times it anew)")

    def _keep_compile_ref(self, key: str, stats: TimingStats, eager: TimingStats | None) -> None:
        """Keep the compile reference as its ratio to the eager median timed beside it: in this process and on
        disk alike, so a later verification on a busier or quieter machine scales it to its own eager median
        (an absolute median reused would move "vs compile" speedups with the machine's load)."""
        if not eager or eager.median_ms <= 0:
            return
        with self._lock:
            self._compile_refs.setdefault(key, _KeptRef(stats, eager.median_ms))
        try:
            write_json(self._compile_ref_path(key), {"at": time.time(), "stats": asdict(stats),
                                                     "eager_ms": eager.median_ms})
        except OSError:  # a read-only cache costs a compile next time, nothing else
            pass

    def _from_reply(self, reply: dict[str, Any], cfg: VerifyConfig, problem: Problem) -> Verdict:
        """The run worker's reply as a verdict with its facets (the rule sets decide its state after)."""
        tail = reply.get("output_tail") or None
        phase = reply.get("phase") or "start-up"
        if reply.get("timed_out"):
            return Verdict(State.TIMEOUT, f"killed after {cfg.timeout_s:g} s (during {phase})",
                           evidence=Evidence(output_tail=tail))
        if reply.get("forged"):  # before the signal: a forger may well have killed its process afterwards
            return _forged(reply)
        if reply.get("signal"):
            # Not kforge's (a timeout is reported as one): where nothing in the program kills itself, the
            # system's out-of-memory killer is the usual sender, and a user should look at memory first.
            hint = (" (SIGKILL from outside: most often the system's out-of-memory killer, when the reference and "
                    "the candidate together need more memory than the machine has)"
                    if reply["signal"] == "SIGKILL" else "")
            return Verdict(State.RUNTIME_ERROR, f"the candidate's process died with {reply['signal']} during "
                           f"{phase}{hint}", evidence=Evidence(output_tail=tail))
        if reply.get("error") or "result" not in reply:
            return Verdict(State.RUNTIME_ERROR, f"the worker failed during {phase}",
                           evidence=Evidence(traceback=reply.get("error"), output_tail=tail))
        r = reply["result"]
        ev = dict(r.get("evidence") or {})
        if r["state"] == PROBLEM_ERROR:
            raise ProblemFails(f"{problem.key}: {r.get('message', '')}", traceback=ev.get("traceback"))
        ev.setdefault("output_tail", tail)
        stats = {k: TimingStats(**r[k]) if r.get(k) else None for k in ("runtime", "ref", "compile_ref", "ref_strict")}
        attribution = Attribution.from_dict(r.get("attribution"))
        facets = Facets(outcome=r["state"], outcome_rule=r.get("rule"), **(r.get("work") or {}),
                        kernel_share=attribution.kernel_share if attribution else None)
        return Verdict(State(r["state"]), r.get("message", ""), evidence=Evidence(**ev), rule=r.get("rule"),
                       trials=r.get("trials", 0), phases=r.get("phases") or {}, attribution=attribution,
                       facets=facets, **stats)


class _Sections:
    """Adds the seconds since the last call to the verifier's ``time_s[name]``."""

    def __init__(self, verifier: "Verifier"):
        self.verifier, self.last = verifier, time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        with self.verifier._lock:
            self.verifier.time_s[name] = self.verifier.time_s.get(name, 0.0) + now - self.last
        self.last = now


def _forged(reply: dict[str, Any]) -> Verdict:
    return Verdict(State.CHEAT_DETECTED, f"the candidate wrote an answer of its own into the worker's reply channel "
                   f"({reply['forged']})", rule="forged_result", evidence=Evidence(output_tail=reply.get("output_tail")))

"""The harness that runs inside a freshly forked worker process, one candidate per process.

`handle` serves three kinds of request: ``build`` (import the candidate with no GPU visible, so its
extensions compile in the CPU build pool), ``run`` (correctness trials then timing) and ``probe``
(what device this is). The process exits after one request, so nothing a candidate changes — patched
functions, leaked threads, a broken CUDA context — reaches the next verdict.

Order inside ``run``: trusted clocks and functions are captured, the reference is built, and only
then is candidate code imported. Each correctness trial draws fresh inputs from a secret seed, runs
the reference first on its own copy, then the candidate on another copy, with uninitialised memory
NaN-filled so unwritten outputs show. Timing interleaves eager, ``torch.compile`` and the candidate
round by round, and every few rounds refills an input set in place and re-checks the output, so an
output cache keyed by pointer or shape fails.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from ..backends import WorkerContext, from_spec
from .compare import Mismatch, as_outputs, check_degenerate, check_structure, compare_tensor
from .harness import Harness, HarnessVerdict, first_line, import_file, phase, phase_times, tail
from .timing import Sampler
from .zygote import take_quiet_lock


def handle(request: dict[str, Any]) -> dict[str, Any]:
    kind = request["kind"]
    if kind == "build":
        return _build(request)
    if kind == "run":
        return _Run(request).execute()
    if kind == "probe":
        return _probe(request)
    if kind == "profile_torch":
        from ..profile.torch_profiler import run_in_worker
        take_quiet_lock()
        return run_in_worker(request)
    if kind == "ceilings":
        from ..profile.ceilings import measure
        take_quiet_lock()
        return measure(from_spec(request["backend"]).device)
    raise ValueError(f"unknown request kind {kind!r}")


def _build(req: dict[str, Any]) -> dict[str, Any]:
    from ..backends.build import CompilationError
    backend = from_spec(req["backend"])
    backend.prepare(WorkerContext(cache_dir=req["cache_dir"], arch=req.get("arch"), build_only=True))
    phase("build")
    try:
        import_file("candidate.py", "kforge_candidate")
    except CompilationError as exc:
        return {"compile_error": tail(exc.log)}
    except SyntaxError as exc:
        return {"compile_error": f"Python syntax error in the candidate: line {exc.lineno}: {exc.msg}\n"
                                 + tail(traceback.format_exc(limit=0))}
    except BaseException:  # noqa: BLE001 - anything else is judged in the run phase, with a device
        return {"import_error": tail(traceback.format_exc())}
    b = backend.builder
    return {"ok": True, "built": list(b.built) if b else [], "cached": list(b.hits) if b else []}


def _probe(req: dict[str, Any]) -> dict[str, Any]:
    import torch
    backend = from_spec(req["backend"])
    if backend.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        major, minor = props.major, props.minor
        return {"device": props.name, "capability": [major, minor], "sms": props.multi_processor_count,
                "l2_bytes": getattr(props, "L2_cache_size", None), "memory_bytes": props.total_memory,
                "torch": torch.__version__}
    import platform
    return {"device": f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
            "torch": torch.__version__}


class _Run(Harness):
    """One verification: correctness trials, then timing."""

    def __init__(self, req: dict[str, Any]):
        super().__init__(req)
        self.trials_done = 0

    def execute(self) -> dict[str, Any]:
        import torch
        result: dict[str, Any] = {}
        try:
            with torch.no_grad():
                result = self._execute()
        except HarnessVerdict as v:
            result = {"state": v.state, "message": v.message, **v.extra}
        result.setdefault("evidence", {})
        result["evidence"].setdefault("notes", []).extend(self.notes)
        result["trials"] = self.trials_done
        result["phases"] = phase_times()
        return result

    def _execute(self) -> dict[str, Any]:
        cfg = self.cfg
        phase("setup")
        self.setup(flush_l2=cfg.timing.flush_l2)
        phase("reference")
        self.load_reference()
        phase("load")
        model = self.load_candidate()
        phase("correctness")
        for trial in range(cfg.trials):
            self.trials_done = trial + 1
            self._trial(model, trial)
        if cfg.skip_timing:
            return {"state": "correct", "message": f"matches the reference on {cfg.trials} trials (timing skipped)"}
        return self._time(model)

    def _trial(self, model, trial: int) -> None:
        torch = self.torch
        inputs = self.inputs(self.draw())
        with self._poisoned_allocations():
            ref_in = self._clone(inputs)
            refs = [r.clone() if isinstance(r, torch.Tensor) else r
                    for r in as_outputs(self.ref_model(*ref_in))]
            cand_in = self._clone(inputs)
            outs = as_outputs(self._call(model, cand_in, f"in forward (trial {trial})"))
        self.trip(f"correctness trial {trial}")
        self._check(outs, refs, cand_in, ref_in, f"correctness trial {trial}")

    def _check(self, outs, refs, cand_in, ref_in, where: str) -> None:
        """Compare as a caller would read the outputs: on the current stream, with no extra synchronize.

        An output that is wrong there but right after a full device synchronize was computed off the
        stream the candidate was called on (a side stream nobody waited for): a race, and a timing dodge.
        """
        try:
            self._compare(outs, refs, cand_in, ref_in, where)
        except HarnessVerdict as first:
            if self.device.type != "cuda" or first.state != "numerical_mismatch":
                raise
            self.torch.cuda.synchronize()
            try:
                self._compare(outs, refs, cand_in, ref_in, where)
            except HarnessVerdict:
                raise first from None
            raise HarnessVerdict("cheat_detected", f"the output is wrong when read on the calling stream and right "
                                 f"only after a full device synchronize ({where}): the work ran on a stream the "
                                 "calling stream does not wait for", rule="unsynchronized_work") from None

    def _compare(self, outs, refs, cand_in, ref_in, where: str) -> None:
        torch = self.torch
        try:
            check_structure(outs, refs, self.device)
            for i, (o, r) in enumerate(zip(outs, refs)):
                if isinstance(r, torch.Tensor):
                    atol, rtol = self.cfg.tolerance(str(r.dtype).removeprefix("torch."), self.problem.tolerance)
                    compare_tensor(o, r, atol, rtol, i)
                    check_degenerate(o, r, i)
        except Mismatch as m:
            state = {"shape": "shape_mismatch", "numerical": "numerical_mismatch"}.get(m.kind, "cheat_detected")
            rule = "output_not_plain_tensor" if state == "cheat_detected" else None
            raise HarnessVerdict(state, f"{m.message} ({where})", rule=rule,
                           evidence={"mismatch": {"trial": where, **m.details}}) from None
        for k, (a, b) in enumerate(zip(cand_in, ref_in)):
            if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                raise HarnessVerdict("cheat_detected", f"the candidate modified input {k} in place ({where}); the "
                               "reference leaves it as it was", rule="input_mutation")

    # -- timing ------------------------------------------------------------------------------------
    def _time(self, model) -> dict[str, Any]:
        torch = self.torch
        cfg, tcfg, clock = self.cfg, self.cfg.timing, self.clock
        # The zygote's next child may be making its CUDA context on this GPU; not while we time.
        phase("waiting for the device")
        take_quiet_lock()
        phase("timing")
        sets = [self.inputs(self.draw()) for _ in range(max(1, tcfg.input_sets))]
        programs: list[tuple[str, Any]] = [("ref", self.ref_model)]
        if cfg.compile_ref:
            phase("compile reference")
            try:
                compiled = torch.compile(self.ref_model, mode=cfg.compile_mode)
                for _ in range(max(1, tcfg.warmup)):
                    compiled(*sets[0])
                clock.sync()
                programs.append(("compile", compiled))
            except Exception as exc:  # noqa: BLE001 - a baseline failing is a note, not the candidate's fault
                self.notes.append(f"torch.compile of the reference failed: {first_line(exc)}")
            phase("timing")
        programs.append(("cand", model))
        for _ in range(tcfg.warmup):  # the compile reference warmed up while compiling
            self.ref_model(*sets[0])
            self._call(model, sets[0], "during warm-up")
        clock.sync()
        self.trip("during warm-up")
        self.tripwire.rebaseline_threads()  # torch.compile may have started worker threads of its own
        protected = self._protected_ptrs(sets, model)
        sampler = Sampler([p[0] for p in programs], tcfg, clock.now)
        rounds = 0
        every = max(1, tcfg.recheck_every)
        while True:
            i = rounds % len(sets)
            # Rechecks after rounds every, 2*every, 4*every, ...: a handful per verification, since
            # refilling inputs costs more than a timed call, and the first one already catches a cache.
            k, r = divmod(rounds + 1, every)
            recheck = r == 0 and k & (k - 1) == 0
            expected = snapshot = None
            if recheck:
                # Same buffers, new values: a cache keyed by pointer or shape now returns stale results.
                for dst, src in zip(sets[i], self.inputs(self.draw())):
                    if isinstance(dst, torch.Tensor):
                        dst.copy_(src)
                expected = [r.clone() if isinstance(r, torch.Tensor) else r
                            for r in as_outputs(self.ref_model(*self._clone(sets[i])))]
                snapshot = self._clone(sets[i])
            for label, prog in programs:
                try:  # the clock flushes L2 itself, right before the start event
                    dev_ms, host_ms, out = clock.time(lambda: prog(*sets[i]))
                except BaseException as exc:  # noqa: BLE001
                    if label != "cand":
                        raise
                    raise self._fail_exception(exc, f"in forward (timing round {rounds})") from None
                sampler.add(label, dev_ms, host_ms)
                if label == "cand" and recheck:
                    self._check(as_outputs(out), expected, sets[i], snapshot,
                                f"timing round {rounds}, fresh inputs")
                _poison(torch, out, protected)
                del out
            rounds += 1
            if recheck:
                self.trip(f"timing round {rounds - 1}")
            if sampler.done(rounds):
                break
        self.trip("after timing")
        self._check_unsynchronized(sampler)
        self.notes.append(f"timing: {rounds} rounds, stopped: {sampler.stop_reason}")
        rechecks = sum(1 for k in range(1, rounds // every + 1) if k & (k - 1) == 0)
        return {"state": "correct", "message": f"matches the reference on {cfg.trials} trials and "
                f"{rechecks} timing rechecks",
                "runtime": _stats(sampler.stats("cand")), "ref": _stats(sampler.stats("ref")),
                "compile_ref": _stats(sampler.stats("compile"))}

    def _check_unsynchronized(self, sampler) -> None:
        """Event time far below host time (with a full device synchronize) means work left the timed stream."""
        if self.device.type != "cuda":
            return
        cand, ref = sampler.stats("cand"), sampler.stats("ref")
        gap = cand.host_median_ms - cand.median_ms
        ref_gap = ref.host_median_ms - ref.median_ms
        if cand.median_ms < 0.5 * cand.host_median_ms and gap - ref_gap > max(0.05, 0.5 * cand.median_ms):
            raise HarnessVerdict("cheat_detected", f"the candidate's work is not on the timed stream: events see "
                           f"{cand.median_ms:.4f} ms, the host waits {cand.host_median_ms:.4f} ms for the device "
                           f"(the reference: {ref.median_ms:.4f} vs {ref.host_median_ms:.4f} ms)",
                           rule="unsynchronized_work")

    def _protected_ptrs(self, sets, model) -> set[int]:
        torch = self.torch
        ptrs = {x.untyped_storage().data_ptr() for s in sets for x in s if isinstance(x, torch.Tensor)}
        for m in (self.ref_model, model):
            if isinstance(m, torch.nn.Module):
                ptrs |= {t.untyped_storage().data_ptr() for t in list(m.parameters()) + list(m.buffers())}
        return ptrs


def _poison(torch, out, protected: set[int]) -> None:
    """NaN-fill an output before it is freed, so the next allocation of that memory holds no result."""
    for t in as_outputs(out):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and type(t) is torch.Tensor \
                and t.untyped_storage().data_ptr() not in protected:
            t.fill_(float("nan"))


def _stats(stats) -> dict[str, Any] | None:
    from dataclasses import asdict
    return asdict(stats) if stats else None

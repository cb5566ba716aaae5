"""Timing inside a verification run: the candidate, eager and ``torch.compile`` interleaved round by round in the
precision's numerics, L2 flushed, an input set refilled in place every few rounds and the output checked again (so a
cache keyed by pointer or shape fails), memory kept within the device's, and the work-off-the-stream check. Mixed
into the run (`kforge.verify.worker`)."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from typing import Any

from ..sandbox.budget import BudgetSpent, budget, spent
from ..sandbox.harness import HarnessVerdict, first_line
from ..sandbox.progress import candidate_code, phase
from ..sandbox.quiet import take_quiet_lock
from ..sandbox.settings import Swap
from .backward import TrainingStep
from .compare import as_outputs
from .timing import Sampler
from .verdict import TimingStats

MEMO_RATIO = 3.0
"""How much slower than its median the candidate's fastest call on fresh values must be to be a kept result's."""
REF_STEADY = 1.5
"""How near its median eager's calls on those values must be: the machine was not merely slow then."""


@dataclasses.dataclass
class RunEnd:
    """How a run ended, before the parts every result carries are added (`kforge.verify.worker`'s run)."""

    state: str
    message: str
    rule: str | None = None
    evidence: dict[str, Any] = dataclasses.field(default_factory=dict)
    timings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``runtime``, ``ref``, ``compile_ref``, ``ref_strict``: `TimingStats` or None."""

    @classmethod
    def of(cls, v: HarnessVerdict) -> "RunEnd":
        return cls(v.state, v.message, v.extra.get("rule"), dict(v.extra.get("evidence") or {}))


class TimedRounds:
    """For `kforge.verify.worker`'s run (a `kforge.verify.trials.Trials`): its timing phase."""

    # -- timing ------------------------------------------------------------------------------------
    def _time_within_budget(self, model) -> RunEnd:
        """Timing within its budget (`kforge.verify.phases`); cut short, it reports what its rounds measured.
        ``model`` None times the baselines alone."""
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
        return RunEnd("correct", message, timings=timings)

    def _time(self, model) -> RunEnd:
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

    def _timed_rounds(self, model, n_sets: int) -> RunEnd:
        torch, tcfg, clock = self.torch, self.cfg.timing, self.clock
        sets = _oom_guard(self, "reference", lambda: [self.inputs(self.draw()) for _ in range(n_sets)])
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
                        self.raise_if_busy(exc)
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
        last: dict[int, set[int]] = {}
        """The storages of the candidate's last output on each input set (a kept output comes back in them)."""
        rechecks = 0
        fresh: dict[str, list[tuple[float, float]]] = {"cand": [], "ref": []}
        """Each program's timed call on values just refilled (a recheck round's): its first sight of them."""
        while True:
            i = rounds % len(sets)
            rng_seed = self.draw() if stochastic else None
            # Rechecks after rounds every, 2*every, 4*every, ...: a handful per verification, since
            # refilling inputs costs more than a timed call, and the first one already catches a cache.
            k, r = divmod(rounds + 1, every)
            recheck = model is not None and r == 0 and k & (k - 1) == 0
            expected = snapshot = None
            if recheck:
                expected, snapshot = _oom_guard(self, "reference", lambda: self._round_check_inputs(
                    sets[i], rng_seed))
            for label, prog, numerics in programs:
                dev_ms, host_ms, out = run(label, prog, numerics, sets[i], rng_seed)
                sampler.add(label, dev_ms, host_ms)
                if recheck and label in fresh:
                    fresh[label].append((dev_ms, host_ms))
                if label == "cand" and recheck:
                    where = f"timing round {rounds}, fresh inputs"
                    _oom_guard(self, "comparison", lambda: self._round_check(
                        out, expected, sets[i], snapshot, rng_seed, where, last.get(i)))
                    rechecks += 1
                if label == "cand":
                    last[i] = _storages(torch, out)
                _poison(torch, out, protected)
                del out
                if label == "cand" and recheck and not self.stateful:
                    # Called once more (untimed) on the same inputs, unchanged: a cache keyed by their address and
                    # version (which the refill changed) returns the output just checked, NaN-filled since.
                    _, _, out = run(label, prog, numerics, sets[i], rng_seed)
                    where = f"timing round {rounds}, the same inputs again, unchanged"
                    _oom_guard(self, "comparison", lambda: self._round_check(
                        out, expected, sets[i], snapshot, rng_seed, where, last[i]))
                    rechecks += 1
                    last[i] = _storages(torch, out)
                    _poison(torch, out, protected)
                    del out
            rounds += 1
            if recheck:
                self.trip(f"timing round {rounds - 1}")
            if sampler.done(rounds):
                break
        self.trip("after timing")
        if model is not None:
            self._check_unsynchronized(sampler, own_streams, model, sets[0])
        self.notes.append(f"timing: {rounds} rounds, stopped: {sampler.stop_reason}")
        runtime = self._on_fresh_values(sampler, fresh) if model is not None else None
        return RunEnd("correct", f"matches the reference on {self.cfg.trials} trials and {rechecks} timing rechecks",
                      timings={"runtime": runtime or sampler.stats("cand"), "ref": sampler.stats("ref"),
                               "compile_ref": sampler.stats("compile"), "ref_strict": sampler.stats("ref_strict")})

    def _on_fresh_values(self, sampler: Sampler, fresh: dict[str, list[tuple[float, float]]]) -> TimingStats | None:
        """The candidate's times on values it had not seen (its timed calls in the recheck rounds, just after the
        refill), where even the fastest of them is `MEMO_RATIO` times its median in the rounds where eager's call was
        near its own median (`REF_STEADY`: the machine was not merely slow, eager not still warming up): a
        result kept by the inputs' contents and handed back on the rounds that repeat them. Its answers are right
        (a hash of every input byte is), and timing rotates a few input sets, so the repeats are most rounds;
        a GEMM on a CPU, where no roofline applies, read 5x eager that way and 0.25x computed. None otherwise."""
        if not fresh["cand"] or not sampler.samples.get("cand") or not sampler.samples.get("ref"):
            return None
        median = statistics.median(sampler.samples["cand"])
        ref_median = statistics.median(sampler.samples["ref"])
        # the recheck rounds where eager ran at its usual speed (the first ones may still be warming up: eager's
        # 36 ms against its median of 11 let a memo pass), the candidate's call in each
        steady = [(c, e) for c, e in zip(fresh["cand"], fresh["ref"]) if e[0] < REF_STEADY * ref_median]
        if not steady:
            return None
        cand = [c for c, _ in steady]
        first = min(ms for ms, _ in cand)
        ref_first = statistics.median(e[0] for _, e in steady)
        if not (median > 0 and first > MEMO_RATIO * median):
            return None
        self.notes.append(f"timing: its calls on values it had seen before took a median {median:.3g} ms, its first "
                          f"calls on fresh values at least {first:.3g} ms (eager's {ref_median:.3g} and "
                          f"{ref_first:.3g} ms): it hands back results kept by input, so its runtime is its calls on "
                          f"fresh values ({len(cand)})")
        return TimingStats.from_samples([ms for ms, _ in cand], [h for _, h in cand])

    def _round_check_inputs(self, inputs: list, rng_seed) -> tuple[Any, list]:
        """A recheck's expected outputs and a copy of its inputs, after the same buffers got new values, so a cache
        keyed by pointer or shape returns stale results."""
        for dst, src in zip(inputs, self.inputs(self.draw())):
            if isinstance(dst, self.torch.Tensor):
                dst.copy_(src)
        return self.recheck_reference(self._clone(inputs), rng_seed), self._clone(inputs)

    def _round_check(self, out, expected, inputs: list, snapshot: list, rng_seed, where: str,
                     earlier: set[int] | None) -> None:
        """A timed call's output against the reference (the kforge view's: KernelBench judges its trials alone).
        Wrong, in the storage of its last output on these buffers (``earlier``) and NaN throughout as kforge left
        that output: it was kept from the earlier call (a cache keyed by the inputs' address, or by address and
        version on inputs unchanged since), and its timing is a lookup's."""
        def kept() -> bool:
            return bool(earlier and _storages(self.torch, out) & earlier) and _all_nan(self.torch, out)

        failed_before = "kforge" in self.views.failed
        try:  # a mismatch here is the kforge view's, recorded; the run goes on while the other view passes
            self._check(self.recheck_outputs(out, snapshot, rng_seed, where), expected, inputs, snapshot, where,
                        recheck=True)
            stale = not failed_before and "kforge" in self.views.failed
        except HarnessVerdict as v:
            stale = v.state == "numerical_mismatch"
            if not (stale and kept()):
                raise
        if stale and kept():
            raise HarnessVerdict("cheat_detected", f"the candidate returned the output of its earlier call on the same "
                                 f"input buffers again ({where}), which kforge had NaN-filled since: a result kept "
                                 "by the inputs' address, not computed, and timed as a lookup", rule="stale_output")

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
                self.raise_if_busy(exc)
                self.notes.append(f"torch.compile of the reference failed: {first_line(exc)}")
            phase("timing")
        if model is not None:  # None: the baselines alone (`Verifier.prepare`)
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

    def verdict(self, run) -> HarnessVerdict:
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


def _oom_guard(run, where: str, fn):
    """``fn()``, its running out of device memory told as `_OutOfMemory` (or `DeviceBusy`, where other processes held
    the memory: `kforge.sandbox.memory`)."""
    try:
        return fn()
    except HarnessVerdict:
        raise
    except BaseException as exc:  # noqa: BLE001
        if _is_oom(run.torch, exc):
            run.raise_if_busy(exc)
            raise _OutOfMemory(where) from None
        raise


def _storages(torch, out) -> set[int]:
    """The storages an output's tensors hold."""
    return {t.untyped_storage().data_ptr() for t in as_outputs(out) if isinstance(t, torch.Tensor)}


def _all_nan(torch, out) -> bool:
    """Whether an output tensor is NaN throughout: what `_poison` left in an output kept since (the allocator may
    well give an honest new output the same storage)."""
    return any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() and bool(t.isnan().all())
               for t in as_outputs(out))


def _poison(torch, out, protected: set[int]) -> None:
    """NaN-fill an output before it is freed, so the next allocation of that memory holds no result."""
    for t in as_outputs(out):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and type(t) is torch.Tensor \
                and t.untyped_storage().data_ptr() not in protected:
            t.fill_(float("nan"))

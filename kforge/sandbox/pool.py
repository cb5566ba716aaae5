"""The pool of worker processes: CPU build slots, a CPU run slot, one slot per GPU.

Each slot is a `zygote <kforge.sandbox.zygote>` process started with a scrubbed environment. Slots
start on first use, or all at once with `WorkerPool.start`, so a CPU-only run never looks for a GPU.
A slot whose process dies (a candidate that killed its parent, say) is replaced, and the request is
reported as lost so the caller can retry it once elsewhere. The pool is thread-safe: problem loops
running in threads share it, and free slots go to them in the order they asked.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .. import cache_dir
from ..backends import BackendSpec
from . import dispatch, resident
from .ceilings import CeilingCache
from .devices import DeviceCache, slot_key
from .env import scrubbed_env
from .gpus import detect_gpus, mps_control_pipe
from .process import ZYGOTE, ResidentWorker, WorkerLost, WorkerProcess  # noqa: F401 - WorkerLost: callers import it here
from .protocol import CeilingsRequest, DeviceInfo, ProbeRequest, Reply, Request
from .zygote import LIGHT_LEVEL, PRELOAD_ENV, SPARE_ENV

log = logging.getLogger(__name__)


class PoolClosed(RuntimeError):
    """The pool was closed: no slot is handed out, and a worker that finishes starting afterwards is stopped."""


class WorkerPool:
    """Slots by kind: ``build`` (CPU, no GPU visible), ``cpu`` (runs CPU candidates), ``cuda:N``."""

    def __init__(self, *, gpus: list[int] | None = None, build_workers: int | None = None, cpu_workers: int = 1,
                 root: str | os.PathLike | None = None, build_cache: str | os.PathLike | None = None,
                 keep_workdirs: bool = False, spare: bool = True, light: bool = False, resident: float = 0.0):
        cpus = os.cpu_count() or 2
        self.build_workers = build_workers or max(1, min(4, cpus // 4))
        self.cpu_workers = cpu_workers
        self._gpus = gpus
        self.build_cache = str(build_cache or cache_dir() / "ext")
        self._tmp = None if root else tempfile.TemporaryDirectory(prefix="kforge-pool-")
        self.root = Path(root or self._tmp.name)
        self.root.mkdir(parents=True, exist_ok=True)
        self.keep_workdirs = keep_workdirs
        self.spare = spare
        """GPU workers keep one child ahead with its CUDA context made (see `kforge.sandbox.zygote`)."""
        self.light = light
        """Workers import torch and its extension builder only, not the compiler stack (dynamo, inductor,
        Triton): they start seconds sooner, and each child imports what it needs. For one verification
        (``kforge verify``, and jobs that neither time torch.compile nor write Triton: `needs_compiler_stack`); a
        sweep that does forks many children and wants them preloaded. Build workers are always light: a build
        never compiles the reference, and a Triton candidate's own import brings Triton (0.4 s)."""
        self.resident = resident
        """Seconds a worker outlives the pool waiting for the next one (`kforge.sandbox.resident`; 0: none does).
        For one-shot commands: ``kforge verify --resident``."""
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)
        self._free: dict[str, list[tuple[str, WorkerProcess | None]]] = {}
        """Free slots per kind, as (label, worker or None when not started); guarded by ``_lock``."""
        self._all: list[WorkerProcess] = []
        self._info: dict[str, Any] = {}
        """Per slot kind: its `DeviceInfo`; per ``ceilings:KIND``: its measured ceilings (or None)."""
        self.counters = {"build": 0, "run": 0, "lost": 0}
        """How many requests of each kind were served (tests assert on these)."""
        self.time_s: dict[str, dict[str, float]] = {}
        """Per slot kind: seconds requests waited for a free slot (``wait``), spent being served (``serve``,
        every request kind; ``run``, run requests alone) and starting worker processes (``start``): where a
        sweep's time goes."""
        self._once_locks: dict[str, threading.Lock] = {}
        self._waiting: list[tuple[int, frozenset[str]]] = []
        """Requests waiting for a slot, in arrival order (ticket, kinds it accepts); guarded by ``_lock``."""
        self._tickets = itertools.count()
        self._closed = False

    # -- devices -----------------------------------------------------------------------------------
    @property
    def gpus(self) -> list[int]:
        if self._gpus is None:
            self._gpus = detect_gpus()
        return self._gpus

    def kinds_for(self, device: str) -> list[str]:
        if device == "cuda":
            return [f"cuda:{g}" for g in self.gpus]
        return ["cpu"]

    def _env(self, kind: str) -> dict[str, str]:
        env = self._kind_env(kind)
        if self.light or kind == "build":
            env[PRELOAD_ENV] = str(LIGHT_LEVEL)
        return env

    def _kind_env(self, kind: str) -> dict[str, str]:
        cpus = os.cpu_count() or 2
        if kind == "build":
            return scrubbed_env({"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1",
                                 "MAX_JOBS": str(max(1, cpus // self.build_workers))})
        if kind == "cpu":
            return scrubbed_env({"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"})
        if self.spare and (pipe := mps_control_pipe()):
            warnings.warn(f"a CUDA MPS daemon is listening at {pipe}: kforge's GPU workers are meant to run without "
                          "it. Under MPS a fatal GPU fault in one candidate reaches every process on its GPU (NVIDIA's "
                          "MPS documentation), the spare kept ready for the next candidate too. Stop the daemon, or "
                          "set workers.spare=false", RuntimeWarning, stacklevel=2)
        # nvidia-smi numbers GPUs in PCI order; make CUDA agree. torch.cuda.is_available() asks the CUDA
        # runtime (which forbids CUDA in every later fork) unless told to ask NVML: the compiler stack
        # calls it at import, and the zygote wants that stack imported before it forks (seen on an H100: without
        # this, both preload levels that import torch._dynamo left children unable to use CUDA).
        return scrubbed_env({"CUDA_VISIBLE_DEVICES": kind.split(":", 1)[1], "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                             "PYTORCH_NVML_BASED_CUDA_CHECK": "1", SPARE_ENV: "1" if self.spare else "0"})

    def _count(self, kind: str) -> int:
        return {"build": self.build_workers, "cpu": self.cpu_workers}.get(kind, 1)

    def slot_count(self, kind: str) -> int:
        """Slots of ``kind`` (one per GPU; ``cpu_workers`` for CPU candidates): how many run at once."""
        return self._count(kind)

    def _free_slots(self, kind: str) -> list[tuple[str, WorkerProcess | None]]:
        """The free list of ``kind``, made on first use; call with ``_lock`` held."""
        if self._closed:
            raise PoolClosed("the worker pool is closed")
        free = self._free.get(kind)
        if free is None:
            free = self._free[kind] = [(f"{kind.replace(':', '')}-{i}", None)  # started on first use
                                       for i in range(self._count(kind))]
        return free

    def _spawn(self, kind: str, label: str) -> WorkerProcess:
        if self._closed:
            raise PoolClosed("the worker pool is closed")
        started = time.monotonic()
        env = dict(self._env(kind), **dispatch.to_env(dispatch.registered()))  # the request kinds known by now
        z = None
        try:
            if self.resident > 0:
                z = resident.connect(ZYGOTE, label, env, self.resident, 300.0,
                                     lambda sock, log, t: ResidentWorker(label, sock, log, t))
            z = z or WorkerProcess(label, env, self.root)
        except OSError:
            if self._closed:  # `close` removed the pool's directory while this worker was starting
                raise PoolClosed("the worker pool is closed") from None
            raise
        self._add_time(kind, "start", time.monotonic() - started)
        with self._lock:
            if not self._closed:
                self._all.append(z)
                return z
        z.close()  # the pool closed while it started (`start`'s background boot): nobody else would stop it
        raise PoolClosed("the worker pool is closed")

    def start(self, kinds: list[str]) -> None:
        """Start every worker process of these slot kinds now, all at once.

        Workers otherwise start on first use, one after another as loops first need a build slot and
        then a device: ~5-10 s each with the compiler stack preloaded, during which every loop waits
        (measured on two H200s: the largest part of a short sweep's lost time). A worker that fails to
        start is left to start on first use, which reports why.
        """
        items = []
        with self._lock:
            if self._closed:  # closed before this (background) start began: nothing to start
                return
            for kind in kinds:
                free = self._free_slots(kind)
                items += [(kind, *item) for item in free]
                free.clear()

        def boot(item):
            kind, label, z = item
            if z is None or not z.alive():
                try:
                    z = self._spawn(kind, label)
                except WorkerLost:
                    z = None
                except PoolClosed:
                    return
            if z is not None:
                z.kind = kind
            with self._returned:  # each slot is usable as soon as its own worker is up
                self._free[kind].append((label, z))
                self._returned.notify_all()

        with ThreadPoolExecutor(max_workers=max(1, len(items))) as ex:
            list(ex.map(boot, items))

    @contextmanager
    def slot(self, kind: str | list[str]) -> Iterator[WorkerProcess]:
        """A free slot of ``kind`` (or of any of several kinds: the first to free up); ``.kind`` says which."""
        kinds = [kind] if isinstance(kind, str) else list(kind)
        asked = time.monotonic()
        got = None
        with self._returned:
            # First come, first served: a free slot goes to the longest-waiting request that can use it, not
            # to whichever waiting thread wakes first (which let some problem loops overtake others).
            ticket = (next(self._tickets), frozenset(kinds))
            self._waiting.append(ticket)
            try:
                while got is None:
                    busy = self.busy_s
                    for k in sorted(kinds, key=lambda k: busy.get(k, 0.0)):  # least used first
                        free = self._free_slots(k)
                        if free and not any(k in ks for t, ks in self._waiting if t < ticket[0]):
                            # A started worker serves at once; starting one costs seconds (measured: 13 s with
                            # the compiler stack on an H200 host), so one-at-a-time use never starts the others.
                            i = next((i for i, (_, z) in enumerate(free) if z is not None and z.alive()), 0)
                            got = (k, *free.pop(i))
                            break
                    else:
                        self._returned.wait(timeout=1.0)
            finally:
                self._waiting.remove(ticket)
                self._returned.notify_all()  # the next in line may now be first for a free slot
        kind, label, z = got
        self._add_time(kind, "wait", time.monotonic() - asked)
        try:
            if z is None or not z.alive():
                z = self._spawn(kind, label)
            z.kind = kind
            yield z
        finally:
            with self._returned:
                self._free[kind].append((label, z if z is not None and z.alive() else None))
                self._returned.notify_all()

    def request(self, kind: str | list[str], request: Request, files: dict[str, str],
                timeout: float) -> Reply:
        """Run one request on a slot of ``kind`` (or the first free of several) in a fresh work directory.

        The request crosses to the child as JSON and its result comes back as the kind's result dataclass
        (`kforge.sandbox.protocol`); the reply's ``slot`` says which slot served it. A reply that does not
        fit its dataclass raises `ProtocolError`, naming the field.
        """
        workdir = self.root / "work" / uuid.uuid4().hex[:12]
        workdir.mkdir(parents=True)
        for name, text in files.items():
            (workdir / name).write_text(text)
        body = dataclasses.replace(request, cache_dir=self.build_cache)
        line = {"kind": request.KIND, "workdir": str(workdir), "timeout": timeout, "body": body.to_wire()}
        try:
            with self.slot(kind) as z:
                start = time.monotonic()
                try:
                    raw = z.request(line, timeout)
                except WorkerLost as exc:
                    self.counters["lost"] += 1
                    exc.kind = z.kind
                    z.close()
                    raise
                finally:
                    served = time.monotonic() - start
                    self._add_time(z.kind, "serve", served)
                    if request.KIND == "run":
                        self._add_time(z.kind, "run", served)
            self.counters["run" if request.KIND == "run" else "build"] += 1
            return Reply.from_wire(raw, z.kind, type(request).RESULT)
        finally:
            if not self.keep_workdirs:
                shutil.rmtree(workdir, ignore_errors=True)

    @property
    def busy_s(self) -> dict[str, float]:
        """Seconds each slot kind spent serving run requests (for GPU busy fractions)."""
        return {k: t["run"] for k, t in list(self.time_s.items()) if t["run"]}

    def _once(self, key: str) -> threading.Lock:
        """A lock per key, so loops starting together probe or measure a device once, not once each."""
        with self._lock:
            return self._once_locks.setdefault(key, threading.Lock())

    def _add_time(self, kind: str, what: str, seconds: float) -> None:
        with self._lock:
            t = self.time_s.setdefault(kind, {"wait": 0.0, "serve": 0.0, "run": 0.0, "start": 0.0})
            t[what] += seconds

    def preloads(self) -> dict[str, list[str]]:
        """What each started worker imported before forking (a GPU one may have had to import less)."""
        with self._lock:
            return {z.label: z.preload for z in self._all if z.alive()}

    def known_device_info(self, kind: str) -> DeviceInfo | None:
        """A slot's device as far as it is known without asking its worker (this pool's probe, or the disk's)."""
        return self._info.get(kind) or DeviceCache(Path(self.build_cache).parent / "devices.json").get(slot_key(kind))

    def device_info(self, kind: str, backend_spec: BackendSpec) -> DeviceInfo:
        """Name, capability etc. of a slot's device: probed once in a child, kept for the pool and on disk
        (`kforge.sandbox.devices`), so later pools know it without waiting for the slot's worker."""
        with self._once(kind):
            if kind not in self._info:
                disk, key = DeviceCache(Path(self.build_cache).parent / "devices.json"), slot_key(kind)
                known = disk.get(key)
                if known is None:
                    reply = self.request(kind, ProbeRequest(backend=backend_spec), {}, timeout=120)
                    known = reply.result or DeviceInfo(device=kind, error=reply.error or reply.output_tail
                                                       or "the probe failed")
                    disk.put(key, known)
                self._info[kind] = known
        return self._info[kind]

    def ceilings(self, kind: str, backend_spec: BackendSpec, fresh: bool = False) -> dict[str, Any] | None:
        """Measured bandwidth and FLOP/s of a slot's device, cached on disk per device and torch version.

        ``fresh`` measures again (once per slot and pool) even when the disk has a value, and keeps the
        higher of the two: the verifier asks for it before calling a kernel faster than the roofline, since
        a cached measurement may have been taken while something else used the device.
        """
        info = self.device_info(kind, backend_spec)
        name = f"ceilings{'-fresh' if fresh else ''}:{kind}"
        with self._once(name):
            if name in self._info:
                return self._info[name]
            cache = CeilingCache(Path(self.build_cache).parent / "ceilings.json")
            key = f"{info.device}|{info.torch}"
            value = None if fresh else cache.get(key)
            if value is None:
                reply = self.request(kind, CeilingsRequest(backend=backend_spec), {}, timeout=300)
                if reply.result is not None:
                    value = cache.put(key, dataclasses.asdict(reply.result))
            self._info[name] = value
            if fresh and value:
                self._info[f"ceilings:{kind}"] = value
        return value

    @property
    def closed(self) -> bool:
        """Whether `close` was called (a second Ctrl-C closes the pool under a job)."""
        return self._closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            zs, self._all = self._all, []
        for z in zs:
            z.close()
        if self._tmp is not None:
            self._remove_tmp()

    def _remove_tmp(self, tries: int = 10) -> None:
        """Remove the pool's folder. A candidate's process that a signal ends with the pool (SIGTERM to `kforge
        eval`) may still be writing there for a moment: "Directory not empty" then made the command exit 1 instead of
        130 with its rows kept. Tried again briefly, then left to the system's temporary-file cleanup."""
        for attempt in range(tries):
            try:
                self._tmp.cleanup()
                return
            except OSError:
                if attempt == tries - 1:
                    log.warning("could not remove the pool's folder %s; left for the system to clean", self.root)
                    return
                time.sleep(0.1)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

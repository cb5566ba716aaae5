"""The ``torch.compile`` reference timed once per problem, device model and torch, and kept
(`VerifyConfig.compile_ref_reuse`): in the verifier's process and for a week on disk.

It is kept as its ratio to the eager median timed beside it, so a later verification on a busier or
quieter machine scales it to its own eager median (an absolute median reused would move "vs compile"
speedups with the machine's load). KernelBench stores its baselines likewise.
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

from ..cachefile import read_json, write_json
from ..problems import Problem
from .config import VerifyConfig
from .verdict import TimingStats

#: A compile-reference median kept on disk is timed anew after this long (drivers, clocks and the machine move on).
COMPILE_REF_MAX_AGE_S = 7 * 24 * 3600


@dataclass(frozen=True)
class KeptRef:
    """A compile-reference timing kept with the eager median timed beside it, and where it came from."""

    stats: TimingStats
    eager_ms: float
    note: str = ""
    """For the verdict's notes: that the figure is a kept one, and whence."""

    def scaled(self, eager: TimingStats | None) -> TimingStats:
        """Its time relative to eager, scaled to this verification's eager median."""
        k = eager.median_ms / self.eager_ms if eager and eager.median_ms > 0 else 1.0
        s = self.stats
        return replace(s, median_ms=s.median_ms * k, mean_ms=s.mean_ms * k, std_ms=s.std_ms * k, min_ms=s.min_ms * k,
                       host_median_ms=s.host_median_ms * k if s.host_median_ms is not None else None)


class CompileRefs:
    """Kept compile references, in memory and under ``<cache>/compile_ref/``. Thread-safe."""

    def __init__(self, root: Path):
        self.root = root
        self._kept: dict[str, KeptRef] = {}
        self._lock = threading.Lock()
        self._claims: dict[str, threading.Event] = {}
        """Keys being timed ahead of a run (`Verifier.prepare`), each set when that is done."""

    def claim(self, key: str) -> bool:
        """Claims ``key`` for timing ahead of any run; False where it is kept already or another claim holds it.
        A claim is ended by `release`, which `known` with ``wait`` waits for."""
        with self._lock:
            if key in self._claims or key in self._kept:
                return False
            self._claims[key] = threading.Event()
            return True

    def release(self, key: str) -> None:
        with self._lock:
            claim = self._claims.pop(key, None)
        if claim is not None:
            claim.set()

    @staticmethod
    def key(problem: Problem, device: str | None, cfg: VerifyConfig, env: dict[str, str] | None = None) -> str | None:
        """Same problem (source and sizes), same GPU model, same timing settings, same precision and input casting
        (KernelBench's rules cast integer inputs too: the audit's cache keys them alike), the same worker environment
        (``env``, a backend's: Triton's interpreter); None when nothing is kept."""
        if not (cfg.compile_ref and cfg.compile_ref_reuse and not cfg.skip_timing) or not device:
            return None
        numerics = f"{cfg.precision}{':all' if cfg.rules == 'kernelbench' else ''}"
        blob = json.dumps([problem.to_dict(), device, metadata.version("torch"), cfg.compile_mode,
                           cfg.to_dict()["timing"], numerics, *(["training step"] if cfg.backward else []),
                           *([sorted(env.items())] if env else [])],
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.root / f"{key[:32]}.json"

    def known(self, key: str | None, wait: bool = False) -> KeptRef | None:
        """A median timed earlier: in this process, or in another one on this machine (on disk), so that a
        one-shot ``kforge verify`` need not compile the reference again, nor even import the compiler. With
        ``wait``, after any claim on it (`claim`) has ended."""
        if not key:
            return None
        with self._lock:
            claim = self._claims.get(key) if wait else None
        if claim is not None:
            claim.wait()
        with self._lock:
            if key in self._kept:
                return self._kept[key]
        entry = read_json(self.path(key))
        if not entry or time.time() - entry.get("at", 0) > COMPILE_REF_MAX_AGE_S:
            return None
        try:
            stats, eager = TimingStats(**entry["stats"]), float(entry["eager_ms"])
        except (KeyError, TypeError, ValueError):
            return None
        when = datetime.fromtimestamp(entry["at"], timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return KeptRef(stats, eager, (f"torch.compile reference: its time relative to eager as timed for this "
                                      f"problem on this device and torch on {when}, scaled to this verification's "
                                      f"eager median (kept in {self.root}; verify.compile_ref_reuse=false times "
                                      "it anew)"))

    def keep(self, key: str, stats: TimingStats, eager: TimingStats | None, ahead: bool = False) -> None:
        """Keep a compile reference timed now, as its ratio to the eager median timed beside it; ``ahead``: timed
        ahead of any candidate (`Verifier.prepare`) rather than in a verification."""
        if not eager or eager.median_ms <= 0:
            return
        when = "ahead of this verification, while the candidate built," if ahead else \
            "in this problem's first verification on this device model,"
        note = (f"torch.compile reference: its time relative to eager as timed {when} scaled to this verification's "
                "eager median (verify.compile_ref_reuse)")
        with self._lock:
            self._kept.setdefault(key, KeptRef(stats, eager.median_ms, note))
        try:
            write_json(self.path(key), {"at": time.time(), "stats": asdict(stats), "eager_ms": eager.median_ms})
        except OSError:  # a read-only cache costs a compile next time, nothing else
            pass

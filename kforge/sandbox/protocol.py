"""The contract between the caller and a worker's child: one request dataclass and one result dataclass per
request kind, and the `Reply` that carries a result back.

A request is built once by its sender, never changed afterwards (the dataclasses are frozen: a verifier that
needs another field makes a new request with ``dataclasses.replace``), and turned into JSON only where it
crosses the process boundary: `WorkerPool.request` sends ``request.to_wire()``, the child decodes it with
`decode_request` and hands the handler the dataclass; the handler returns its result dataclass, which the
pool decodes again on the caller's side. Decoding checks every field against its type, so a reply that does
not fit its dataclass is a `ProtocolError` naming the field (``run result: runtime.median_ms must be a
number, not 'fast'``) instead of a ``KeyError`` three layers up.

The sandbox serves two kinds of its own (``probe``, ``ceilings``, below); the layers above declare theirs
beside their handlers (`kforge.verify.protocol`: ``build``, ``run``, ``audit``; `kforge.profile.protocol`:
``profile_torch``; `kforge.workload.protocol`: ``workload_profile``). A `Request` subclass names its
``KIND`` (which handler serves it) and its ``RESULT`` class; a handler's annotation names the request
dataclass it takes (`kforge.sandbox.dispatch.handle` decodes the body as that).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from ..backends import BackendSpec
from ..errors import KforgeError
from ..problems import Problem


class ProtocolError(KforgeError, RuntimeError):
    """A message between the caller and a worker does not fit its dataclass; the message names the field."""


M = TypeVar("M", bound="Message")
R = TypeVar("R", bound="Message")

_NONE = type(None)
_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
          tuple: "a list", dict: "a mapping"}


def encode(value: Any) -> Any:
    """A dataclass (nested ones too), enum, tuple, list or mapping as plain JSON data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    return value


def _word(hint: Any) -> str:
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    words = [_WORDS.get(typing.get_origin(a) or a, getattr(a, "__name__", str(a))) for a in args if a is not _NONE]
    return " or ".join(words) + (" (or null)" if _NONE in args else "")


def decode(hint: Any, value: Any, where: str) -> Any:
    """``value`` (JSON data) as the type ``hint`` names, checked all the way down; `ProtocolError` otherwise."""
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None:
            if _NONE in args:
                return None
            raise ProtocolError(f"{where} must be {_word(hint)}, not null")
        inner = [a for a in args if a is not _NONE]
        if len(inner) == 1:
            return decode(inner[0], value, where)
        for a in inner:
            try:
                return decode(a, value, where)
            except ProtocolError:
                continue
        raise ProtocolError(f"{where} must be {_word(hint)}, not {value!r:.80}")
    if dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, value, where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise ProtocolError(f"{where} must be one of {', '.join(str(m.value) for m in hint)}, "
                                f"not {value!r:.80}") from None
    base = origin or hint
    if base in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ProtocolError(f"{where} must be a list, not {value!r:.80}")
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        items = [decode(args[0], v, f"{where}[{i}]") if args else v for i, v in enumerate(value)]
        return tuple(items) if base is tuple else items
    if base is dict:
        if not isinstance(value, Mapping):
            raise ProtocolError(f"{where} must be a mapping, not {value!r:.80}")
        args = typing.get_args(hint)
        return {k: decode(args[1], v, f"{where}.{k}") if args else v for k, v in value.items()}
    if base is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif base is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif base in (str, bool):
        if isinstance(value, base):
            return value
    elif hint is _NONE:
        if value is None:
            return None
    else:
        raise TypeError(f"{where}: the protocol cannot carry {hint!r}")  # a bug in a message's declaration
    raise ProtocolError(f"{where} must be {_word(hint)}, not {value!r:.80}")


def _decode_dataclass(cls: type, value: Any, where: str) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ProtocolError(f"{where} must be a mapping (a {cls.__name__}), not {value!r:.80}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ProtocolError(f"{where} has no field {', '.join(unknown)} (a {cls.__name__} has "
                            f"{', '.join(fields)})")
    hints = typing.get_type_hints(cls)
    kwargs = {name: decode(hints[name], v, f"{where}.{name}") for name, v in value.items()}
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ProtocolError(f"{where} lacks {', '.join(missing)} (required in a {cls.__name__})")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # the dataclass's own check (``__post_init__``)
        raise ProtocolError(f"{where}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class Message:
    """What crosses the process boundary: plain JSON there (`to_wire`), this dataclass everywhere else."""

    def to_wire(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_wire(cls: type[M], data: Any, where: str | None = None) -> M:
        return _decode_dataclass(cls, data, where or _label(cls))


def _label(cls: type) -> str:
    kind = getattr(cls, "KIND", "") or getattr(cls, "FOR_KIND", "")
    return f"{kind} {'request' if issubclass(cls, Request) else 'result'}" if kind else cls.__name__


@dataclass(frozen=True, kw_only=True)
class Request(Message):
    """A request to a worker's child. A subclass sets ``KIND`` (the handler it goes to) and ``RESULT``."""

    KIND: ClassVar[str] = ""
    RESULT: ClassVar[type[Message]]

    cache_dir: str = ""
    """kforge's build cache; the pool fills it in (`WorkerPool.request`), senders leave it empty."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("KIND") and "FOR_KIND" not in cls.RESULT.__dict__:
            cls.RESULT.FOR_KIND = cls.KIND  # so its errors say "run result", not "RunResult"


@dataclass(frozen=True, kw_only=True)
class Progress(Message):
    """What a child reported as it went (`kforge.sandbox.progress`): read when it was stopped at its timeout."""

    in_candidate: bool = False
    """Candidate code was running when the child last reported (a call its handler marked)."""
    milestones: dict[str, Any] = dataclasses.field(default_factory=dict)
    """What the handler had established, by name; the handler's layer reads its own (`RunProgress`, ...)."""


@dataclass(frozen=True, kw_only=True)
class Reply(Generic[R]):
    """How a child's work on one request ended, and its result. Made by the pool from the zygote's line."""

    slot: str
    """The slot that served it (``cpu``, ``build``, ``cuda:0``)."""
    wall_s: float = 0.0
    timed_out: bool = False
    """The child ran past the request's timeout and was killed with its process group."""
    output_tail: str = ""
    """The end of what the child printed."""
    phase: str | None = None
    """The last phase marker the child left (how far it got)."""
    signal: str | None = None
    """The signal that ended the child, when one did (not a timeout's)."""
    exit_code: int | None = None
    pid: int | None = None
    """The child process that served it."""
    forged: str | None = None
    """Something other than the harness wrote into the reply pipe (`kforge.sandbox.zygote`)."""
    progress: Progress | None = None
    """What the child had established when it stopped reporting (`kforge.sandbox.progress`)."""
    error: str | None = None
    """The handler raised (or the worker failed): its traceback's tail."""
    busy: str | None = None
    """The run ran out of device memory that other processes held, and gave no verdict (`kforge.sandbox.memory`)."""
    result: R | None = None

    @classmethod
    def from_wire(cls, data: Mapping[str, Any], slot: str, result: type[R]) -> "Reply[R]":
        """The zygote's reply line; ``result`` is decoded as the request kind's result dataclass."""
        if not isinstance(data, Mapping):
            raise ProtocolError(f"a worker's reply must be a mapping, not {data!r:.80}")
        envelope = {k: v for k, v in data.items() if k != "result"}
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)} - {"slot", "result"}
        unknown = sorted(set(envelope) - known)
        if unknown:
            raise ProtocolError(f"a worker's reply has no field {', '.join(unknown)}")
        fields = {k: decode(hints[k], v, f"reply.{k}") for k, v in envelope.items()}
        body = data.get("result")
        decoded = result.from_wire(body) if body is not None else None
        return cls(slot=slot, result=decoded, **fields)

    @property
    def ok(self) -> bool:
        """The handler returned a result (whatever the result says)."""
        return self.result is not None and not (self.timed_out or self.forged or self.error)


# -- the sandbox's own kinds ------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class DeviceInfo(Message):
    """What a slot's device is (``probe``)."""

    device: str
    """Its name (``NVIDIA H100 80GB HBM3``, ``cpu (x86_64, 2 cores)``)."""
    torch: str = ""
    capability: list[int] | None = None
    """CUDA compute capability (major, minor); None off CUDA."""
    sms: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    error: str | None = None
    """Why the probe failed (the other fields then say little)."""


@dataclass(frozen=True, kw_only=True)
class ProbeRequest(Request):
    KIND: ClassVar[str] = "probe"
    RESULT: ClassVar[type[Message]] = DeviceInfo
    backend: BackendSpec


@dataclass(frozen=True, kw_only=True)
class Ceilings(Message):
    """Measured rates of a device (``ceilings``): what speed of light is reckoned against."""

    bandwidth_bytes_per_s: float
    """Bytes read plus bytes written per second by a large device copy."""
    fp32_flops: float | None = None
    tf32_flops: float | None = None
    bf16_flops: float | None = None
    device: str | None = None
    torch: str = ""


@dataclass(frozen=True, kw_only=True)
class CeilingsRequest(Request):
    KIND: ClassVar[str] = "ceilings"
    RESULT: ClassVar[type[Message]] = Ceilings
    backend: BackendSpec


@dataclass(frozen=True, kw_only=True)
class ProgramRequest(Request):
    """What every request that loads a problem (and maybe a candidate) in a child carries; `Harness` reads it."""

    problem: Problem
    backend: BackendSpec
    config: dict[str, Any]
    """The verifier's settings (`VerifyConfig.to_dict`), checked by ``VerifyConfig.from_dict`` in the child."""
    arch: str | None = None
    """TORCH_CUDA_ARCH_LIST for builds (CUDA only)."""


__all__ = ["Ceilings", "CeilingsRequest", "DeviceInfo", "Message", "ProbeRequest", "ProgramRequest", "Progress",
           "ProtocolError", "Reply", "Request", "decode", "encode"]

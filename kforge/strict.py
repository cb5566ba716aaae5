"""The one way a config group's dict becomes its dataclass: strict, so a misspelt key is an error.

Every group of ``conf/`` (and each nested table such as ``verify.timing``) is a dataclass deriving
from `StrictConfig`. ``Group.from_dict(d, "verify")`` rejects a key the dataclass does not have,
naming the valid ones and the key's full Hydra path; builds nested dataclasses from nested dicts;
checks each value against its field's type (``loop.iterations=abc`` is "loop.iterations must be an
integer, not 'abc'"); and turns a value the dataclass refuses (its ``__post_init__`` raising
``ValueError``) into a `ConfigError`, so a bad override ends in one line the user can act on, not a
traceback.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from .errors import ConfigError

T = TypeVar("T", bound="StrictConfig")


def _dataclass_in(hint: Any) -> tuple[type | None, bool]:
    """The dataclass a field's type names (``X``, ``X | None``), and whether None is allowed."""
    if dataclasses.is_dataclass(hint):
        return hint, False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        for a in args:
            if dataclasses.is_dataclass(a):
                return a, type(None) in args
    return None, False


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
          dict: "a mapping"}


def _fits(hint: Any, value: Any) -> bool:
    """Whether ``value`` is of the type ``hint`` names (Any, unions, lists and dicts of anything)."""
    if hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(a, value) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    base = origin or hint
    if base is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if base in (list, tuple):
        args = typing.get_args(hint)
        return isinstance(value, (list, tuple)) and (not args or all(_fits(args[0], v) for v in value))
    if base is dict:
        return isinstance(value, Mapping)
    return isinstance(value, base) if isinstance(base, type) else True


def _expected(hint: Any) -> str:
    """``int | None`` -> "an integer (or null)"."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    words = [_KINDS.get(typing.get_origin(a) or a, getattr(a, "__name__", str(a))) for a in args
             if a is not type(None)]
    return " or ".join(words) + (" (or null)" if type(None) in args else "")


def from_dict(cls: type[T], data: Any, where: str = "") -> T:
    """``cls`` from ``data`` (a mapping, or None for all defaults); ``where`` is its Hydra path."""
    if data is None:
        data = {}
    if isinstance(data, cls):
        return data
    prefix = f"{where}." if where else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'the configuration'} must be a mapping of settings, not {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown setting{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(prefix + k for k in unknown)} (valid under {where or 'the top level'}: "
                          f"{', '.join(sorted(fields))})")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        sub, optional = _dataclass_in(hints.get(name))
        if sub is not None and not isinstance(value, sub):
            if value is None or (optional and value == {}):
                if optional:  # None means "not set" (e.g. analysis.model: reuse the generation model)
                    kwargs[name] = None
                continue  # a non-optional table given as null: its defaults, as before
            # The class's own from_dict, where it adds a check of its own (VerifyConfig does).
            value = (sub.from_dict(value, prefix + name) if issubclass(sub, StrictConfig)
                     else from_dict(sub, value, prefix + name))
        elif name in hints and not _fits(hints[name], value):
            raise ConfigError(f"{prefix}{name} must be {_expected(hints[name])}, not {value!r}")
        kwargs[name] = value
    missing = sorted(n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING)
    if missing:
        raise ConfigError(f"{', '.join(prefix + m for m in missing)} must be set")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:  # the dataclass's own checks (e.g. loop.mode)
        msg = str(exc)
        raise ConfigError(msg if not where or msg.startswith(where) else f"{where}: {msg}") from None


class StrictConfig:
    """Mixin of every config dataclass: ``from_dict`` (strict, see the module) and ``to_dict``."""

    @classmethod
    def from_dict(cls: type[T], data: Any, where: str = "") -> T:
        return from_dict(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


def field_names(cls: type) -> list[str]:
    """The settings a config dataclass accepts (for messages and tests)."""
    return [f.name for f in dataclasses.fields(cls) if f.init]


__all__ = ["StrictConfig", "field_names", "from_dict"]

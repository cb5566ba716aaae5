"""Child dispatch: which function serves a request of each kind.

The sandbox serves ``probe`` and ``ceilings`` itself; the layers above register theirs (``build``,
``run``, ``audit`` from `kforge.verify`, ``profile_torch`` from `kforge.profile`) as ``module:function``
paths, at import, in the process that starts the pool. The pool gives each worker it starts the table
in its environment (`HANDLERS_ENV`); the worker imports those modules before it forks, and a child
calls the function its request's ``kind`` names. So the sandbox never imports the layers above it, and
a request line is what it always was.

A kind must be registered before the pool starts the worker that serves it: importing `kforge.verify`
or `kforge.profile` does that, and whoever sends their requests has imported them.

A handler takes the kind's request dataclass and returns its result dataclass (`kforge.sandbox.protocol`);
`handle` decodes the one and encodes the other, so JSON exists only on the pipe.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any, Callable

HANDLERS_ENV = "KFORGE_HANDLERS"
"""A worker's table of request kinds: JSON, kind -> ``module:function``."""

_REGISTERED: dict[str, str] = {"probe": "kforge.sandbox.handlers:probe",
                               "ceilings": "kforge.sandbox.handlers:ceilings"}


def register(kind: str, target: str) -> None:
    """Serve requests of ``kind`` with ``target`` (``package.module:function``) in workers started from now on."""
    module, sep, name = target.partition(":")
    if not (module and sep and name):
        raise ValueError(f"a request handler is 'module:function', not {target!r}")
    _REGISTERED[kind] = target


def registered() -> dict[str, str]:
    """The table a worker started now gets."""
    return dict(_REGISTERED)


def to_env(table: dict[str, str]) -> dict[str, str]:
    return {HANDLERS_ENV: json.dumps(table, sort_keys=True)}


def table() -> dict[str, str]:
    """This worker's table: from its environment, else what this process registered."""
    text = os.environ.get(HANDLERS_ENV)
    return json.loads(text) if text else registered()


def preload() -> None:
    """Import every handler's module (a zygote does this once, so its children start with them)."""
    for target in table().values():
        importlib.import_module(target.partition(":")[0])


def _resolve(target: str) -> Callable[[Any], Any]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def request_type(handler: Callable[[Any], Any], target: str = "") -> type:
    """The request dataclass a handler takes: its first parameter's annotation."""
    import inspect
    import typing

    from .protocol import Request
    params = list(inspect.signature(handler).parameters)
    hint = typing.get_type_hints(handler).get(params[0]) if params else None
    if not (isinstance(hint, type) and issubclass(hint, Request)):
        raise TypeError(f"the handler {target or handler} must take one kforge.sandbox.protocol.Request "
                        f"subclass, annotated (it takes {hint!r})")
    return hint


def handle(wire: dict[str, Any]) -> dict[str, Any]:
    """Serve one request line in this (child) process: its body decoded as the kind's request dataclass, the
    handler's result encoded as JSON data."""
    from .protocol import ProtocolError
    kind = wire["kind"]
    target = table().get(kind)
    if target is None:
        raise ValueError(f"unknown request kind {kind!r}")
    handler = _resolve(target)
    cls = request_type(handler, target)
    request = cls.from_wire(wire.get("body"))
    result = handler(request)
    if not isinstance(result, type(request).RESULT):
        raise ProtocolError(f"the {kind} handler {target} returned {type(result).__name__}, not "
                            f"{type(request).RESULT.__name__}")
    return result.to_wire()

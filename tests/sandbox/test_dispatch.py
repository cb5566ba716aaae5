"""Child dispatch: a request's kind names the function that serves it, registered by the layer that sends it."""

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from kforge.backends import get_backend
from kforge.sandbox import dispatch
from kforge.sandbox.pool import WorkerPool
from kforge.sandbox.protocol import ProbeRequest


@dataclass(frozen=True, kw_only=True)
class DeviceRequest(ProbeRequest):
    """A probe sent under another kind: the kind routes, the handler's annotation says what it takes."""

    KIND: ClassVar[str] = "device"


@dataclass(frozen=True, kw_only=True)
class LateRequest(ProbeRequest):
    KIND: ClassVar[str] = "late"


@pytest.fixture
def registry(monkeypatch):
    """Registrations made by a test end with it."""
    monkeypatch.setattr(dispatch, "_REGISTERED", dict(dispatch._REGISTERED))


def test_the_upper_layers_register_their_kinds_on_import():
    import kforge.profile  # noqa: F401
    import kforge.verify  # noqa: F401
    table = dispatch.registered()
    assert {k: table[k] for k in ("probe", "ceilings", "build", "run", "audit", "profile_torch")} == {
        "probe": "kforge.sandbox.handlers:probe", "ceilings": "kforge.sandbox.handlers:ceilings",
        "build": "kforge.verify.worker:build", "run": "kforge.verify.worker:run",
        "audit": "kforge.verify.worker:audit", "profile_torch": "kforge.profile.torch_profiler:run_in_worker"}


def test_a_child_serves_what_its_environment_table_names(monkeypatch):
    monkeypatch.setenv(dispatch.HANDLERS_ENV, json.dumps({"device": "kforge.sandbox.handlers:probe"}))
    body = ProbeRequest(backend=get_backend("cpu").spec()).to_wire()
    assert dispatch.handle({"kind": "device", "body": body})["device"].startswith("cpu")
    with pytest.raises(ValueError, match="unknown request kind 'probe'"):  # the table is the worker's whole world
        dispatch.handle({"kind": "probe", "body": body})


def test_a_handler_must_say_which_request_it_takes(monkeypatch):
    monkeypatch.setenv(dispatch.HANDLERS_ENV, json.dumps({"dump": "json:dumps"}))
    with pytest.raises(TypeError, match="json:dumps must take one kforge.sandbox.protocol.Request"):
        dispatch.handle({"kind": "dump", "body": {}})


def test_a_handler_path_is_module_colon_function(registry):
    with pytest.raises(ValueError, match="module:function"):
        dispatch.register("x", "kforge.sandbox.handlers.probe")


def test_workers_serve_the_kinds_registered_before_they_start(tmp_path, registry):
    spec = get_backend("cpu").spec()
    with WorkerPool(gpus=[], cpu_workers=1, build_workers=1, build_cache=tmp_path / "cache") as pool:
        dispatch.register("device", "kforge.sandbox.handlers:probe")  # workers start on first use: after this
        reply = pool.request("cpu", DeviceRequest(backend=spec), {}, timeout=120)
        assert reply.result.device.startswith("cpu"), reply
        dispatch.register("late", "kforge.sandbox.handlers:probe")  # this worker was started without it
        reply = pool.request("cpu", LateRequest(backend=spec), {}, timeout=120)
        assert reply.result is None and "unknown request kind 'late'" in reply.error

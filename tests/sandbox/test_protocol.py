"""The worker contract: requests and results are dataclasses, JSON only on the pipe, checked field by field."""

import dataclasses
import json

import pytest

from kforge.backends import get_backend
from kforge.problems import resolve_problem
from kforge.sandbox import dispatch
from kforge.sandbox.pool import WorkerPool, WorkerProcess
from kforge.sandbox.protocol import DeviceInfo, ProbeRequest, ProtocolError, Reply
from kforge.verify import Verifier
from kforge.verify.protocol import RunRequest, RunResult
from kforge.verify.verdict import TimingStats
from tests.helpers import fast_config


def test_a_request_crosses_as_json_and_comes_back_the_same_dataclass():
    p = resolve_problem("level1/1_ReLU", size="cpu")
    req = RunRequest(problem=p, backend=get_backend("cpu").spec(), config=fast_config().to_dict(), arch=None,
                     own_streams=True, failed_builds={"k": "log"})
    wire = json.loads(json.dumps(req.to_wire()))
    back = RunRequest.from_wire(wire)
    assert back == req and back.problem.ops == p.ops  # tuples survive the JSON lists
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.own_streams = False  # nobody changes a request once made: replace() makes another


def test_a_malformed_result_names_the_field():
    line = {"wall_s": 1.0, "timed_out": False, "output_tail": "", "pid": 7,
            "result": {"state": "correct", "trials": 5, "runtime": {"median_ms": "fast", "mean_ms": 1.0,
                                                                    "std_ms": 0.0, "n": 3, "min_ms": 1.0}}}
    with pytest.raises(ProtocolError, match=r"run result\.runtime\.median_ms must be a number, not 'fast'"):
        Reply.from_wire(line, "cpu", RunResult)
    line["result"] = {"state": "correct", "trails": 5}
    with pytest.raises(ProtocolError, match="run result has no field trails"):
        Reply.from_wire(line, "cpu", RunResult)
    line["result"] = {"state": "nearly_correct"}
    with pytest.raises(ProtocolError, match="state must be one of .* not 'nearly_correct'"):
        Reply.from_wire(line, "cpu", RunResult)
    line["result"] = {"state": "correct", "runtime": {"median_ms": 1.0, "mean_ms": 1.0, "std_ms": 0.0, "n": 3}}
    with pytest.raises(ProtocolError, match=r"run result\.runtime lacks min_ms"):
        Reply.from_wire(line, "cpu", RunResult)
    line["result"] = {"state": "correct", "runtime": {"median_ms": 1.0, "mean_ms": 1.0, "std_ms": 0.0, "n": 3,
                                                      "min_ms": 0.5}}
    reply = Reply.from_wire(line, "cpu", RunResult)
    assert reply.ok and reply.slot == "cpu" and isinstance(reply.result.runtime, TimingStats)
    with pytest.raises(ProtocolError, match="reply has no field kind"):
        Reply.from_wire(dict(line, kind="cpu"), "cpu", RunResult)


def test_the_verifier_stops_on_a_reply_that_does_not_fit_and_says_which_field(tmp_path, monkeypatch):
    """A worker answering out of contract is kforge's bug, not the candidate's verdict: an error naming the field."""
    real = WorkerProcess.request

    def garbled(self, line, timeout):
        raw = real(self, line, timeout)
        if line["kind"] == "run" and raw.get("result"):
            raw["result"]["trials"] = "five"
        return raw

    monkeypatch.setattr(WorkerProcess, "request", garbled)
    p = resolve_problem("level1/1_ReLU", size="cpu")
    with WorkerPool(gpus=[], cpu_workers=1, build_workers=1, build_cache=tmp_path / "ext") as pool:
        verifier = Verifier(fast_config(require_kernel=False, skip_timing=True, attribution=False, audit=False),
                            pool=pool)
        with pytest.raises(ProtocolError, match=r"run result\.trials must be an integer, not 'five'"):
            verifier.verify(p, "import torch\nclass ModelNew(torch.nn.Module):\n"
                               "    def forward(self, x):\n        return torch.relu(x)\n", "cpu")


def test_a_child_refuses_a_request_body_that_does_not_fit(monkeypatch):
    monkeypatch.setenv(dispatch.HANDLERS_ENV, json.dumps({"probe": "kforge.sandbox.handlers:probe"}))
    with pytest.raises(ProtocolError, match=r"probe request\.backend lacks device"):
        dispatch.handle({"kind": "probe", "body": {"backend": {"name": "cpu"}}})
    info = dispatch.handle({"kind": "probe", "body": ProbeRequest(backend=get_backend("cpu").spec()).to_wire()})
    assert DeviceInfo.from_wire(info).device.startswith("cpu")

"""A slot's device known without asking its worker: the probe's answer kept on disk under what identifies it."""

import torch

from kforge.backends import get_backend
from kforge.sandbox import devices
from kforge.sandbox.devices import DeviceCache, slot_key, torch_version
from kforge.sandbox.pool import WorkerPool
from kforge.sandbox.protocol import DeviceInfo


def test_torch_version_without_importing_it_is_torchs_own():
    assert torch_version() == torch.__version__


def test_keys_name_the_device_and_torch(monkeypatch):
    assert slot_key("build") is None
    assert slot_key("cpu").startswith("cpu|") and slot_key("cpu").endswith(torch.__version__)
    monkeypatch.setattr(devices, "gpu_identities", lambda: {0: "GPU-1234|580.1", 1: "GPU-5678|580.1"})
    assert slot_key("cuda:0") == f"cuda|GPU-1234|580.1|{torch.__version__}" != slot_key("cuda:1")
    assert slot_key("cuda:7") is None  # not one nvidia-smi knows: probed


def test_a_kept_answer_spares_the_probe_and_the_worker(tmp_path):
    cache = DeviceCache(tmp_path / "devices.json")
    cache.put(slot_key("cpu"), DeviceInfo(device="cpu (kept)", torch=torch.__version__))
    cache.put("other", DeviceInfo(device="x", error="the probe failed"))  # a failed probe is never kept
    assert cache.get("other") is None
    with WorkerPool(gpus=[], build_cache=tmp_path / "ext") as pool:
        assert pool.known_device_info("cpu").device == "cpu (kept)"
        assert pool.device_info("cpu", get_backend("cpu").spec()).device == "cpu (kept)"
        assert pool.counters["build"] == 0 and pool.preloads() == {}  # no probe sent, no worker started

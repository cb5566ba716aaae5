"""Measured device ceilings: the on-disk cache keeps the best reading, and a slot can be measured afresh."""

import json

from kforge.backends import get_backend
from kforge.sandbox.ceilings import CeilingCache
from kforge.verify import WorkerPool


def test_cache_keeps_the_highest_rate_seen(tmp_path):
    cache = CeilingCache(tmp_path / "ceilings.json")
    first = cache.put("GPU|torch", {"bandwidth_bytes_per_s": 4e12, "fp32_flops": 4e13, "device": "GPU"})
    assert first["bandwidth_bytes_per_s"] == 4e12
    # A reading taken while the device was shared is lower in one rate and higher in another.
    merged = cache.put("GPU|torch", {"bandwidth_bytes_per_s": 2.7e12, "fp32_flops": 5e13, "device": "GPU"})
    assert merged == {"bandwidth_bytes_per_s": 4e12, "fp32_flops": 5e13, "device": "GPU"}
    assert cache.get("GPU|torch") == merged
    assert cache.get("other|torch") is None


def test_fresh_ceilings_replace_a_reading_that_was_too_low(tmp_path):
    spec = get_backend("cpu").spec()
    with WorkerPool(gpus=[], cpu_workers=1, build_workers=1, build_cache=tmp_path / "ext") as pool:
        info = pool.device_info("cpu", spec)
        key = f"{info.device}|{info.torch}"
        path = tmp_path / "ceilings.json"
        path.write_text(json.dumps({key: {"bandwidth_bytes_per_s": 1.0, "fp32_flops": 1.0}}))
        measured = []
        request = pool.request
        pool.request = lambda kind, payload, files, timeout: (measured.append(payload.KIND),
                                                                request(kind, payload, files, timeout))[1]
        assert pool.ceilings("cpu", spec)["bandwidth_bytes_per_s"] == 1.0  # from disk, not measured
        assert measured == []
        fresh = pool.ceilings("cpu", spec, fresh=True)
        assert measured == ["ceilings"]
        assert fresh["bandwidth_bytes_per_s"] > 1e8 and fresh["fp32_flops"] > 1e6
        assert json.loads(path.read_text())[key]["bandwidth_bytes_per_s"] == fresh["bandwidth_bytes_per_s"]
        # Measured once per slot and pool; the plain lookup now answers with the new reading too.
        assert pool.ceilings("cpu", spec, fresh=True) is fresh and pool.ceilings("cpu", spec) is fresh
        assert measured == ["ceilings"]

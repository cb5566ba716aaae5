"""The requests every worker serves, whatever layer uses the pool: ``probe`` and ``ceilings``."""

from __future__ import annotations

from typing import Any

from ..backends import from_spec
from .ceilings import measure
from .harness import cpu_name
from .quiet import take_quiet_lock


def probe(req: dict[str, Any]) -> dict[str, Any]:
    """What device this is (name, capability, SMs, L2, memory) and the torch version."""
    import torch
    backend = from_spec(req["backend"])
    if backend.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        major, minor = props.major, props.minor
        return {"device": props.name, "capability": [major, minor], "sms": props.multi_processor_count,
                "l2_bytes": getattr(props, "L2_cache_size", None), "memory_bytes": props.total_memory,
                "torch": torch.__version__}
    return {"device": cpu_name(), "torch": torch.__version__}


def ceilings(req: dict[str, Any]) -> dict[str, Any]:
    """Measured bandwidth and matmul rates, timed under the quiet lock like any timing."""
    take_quiet_lock()
    return measure(from_spec(req["backend"]).device)

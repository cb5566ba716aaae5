"""The requests every worker serves, whatever layer uses the pool: ``probe`` and ``ceilings``."""

from __future__ import annotations

from ..backends import from_spec
from .ceilings import measure
from .harness import cpu_name
from .protocol import Ceilings, CeilingsRequest, DeviceInfo, ProbeRequest
from .quiet import take_quiet_lock


def probe(req: ProbeRequest) -> DeviceInfo:
    """What device this is (name, capability, SMs, L2, memory) and the torch version."""
    import torch
    backend = from_spec(req.backend)
    if backend.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        return DeviceInfo(device=props.name, capability=[props.major, props.minor], sms=props.multi_processor_count,
                          l2_bytes=getattr(props, "L2_cache_size", None), memory_bytes=props.total_memory,
                          torch=torch.__version__)
    return DeviceInfo(device=cpu_name(), torch=torch.__version__)


def ceilings(req: CeilingsRequest) -> Ceilings:
    """Measured bandwidth and matmul rates, timed under the quiet lock like any timing."""
    take_quiet_lock()
    return Ceilings(**measure(from_spec(req.backend).device))

"""What this host's GPUs are, asked without initialising CUDA in the asking process."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess


def detect_gpus() -> list[int]:
    """Indices of visible NVIDIA GPUs, asked of nvidia-smi so this process never initialises CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    indices = [int(x) for x in out.stdout.split() if x.strip().isdigit()]
    if visible:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        if all(w.isdigit() for w in wanted):
            indices = [int(w) for w in wanted if int(w) in indices]
    return indices


@functools.cache
def gpu_identities() -> dict[int, str]:
    """nvidia-smi's index -> ``UUID|driver version`` of each GPU (what identifies a device without touching it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        out = subprocess.run([smi, "--query-gpu=index,uuid,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and parts[1].startswith("GPU-"):
            found[int(parts[0])] = f"{parts[1]}|{parts[2]}"
    return found


def mps_control_pipe() -> str | None:
    """The CUDA MPS control daemon's socket where this process's CUDA clients would look for it, if present."""
    path = os.path.join(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps", "control")
    return path if os.path.exists(path) else None


def arch_of(capability: list[int] | tuple[int, int]) -> str:
    """TORCH_CUDA_ARCH_LIST entry for a device: the arch-specific target (``9.0a``) from Hopper on."""
    major, minor = int(capability[0]), int(capability[1])
    return f"{major}.{minor}a" if major >= 9 else f"{major}.{minor}"

"""OpenCL backend: OpenCL C kernels built with pyopencl and enqueued on the memory of torch CPU tensors.

A candidate builds its kernels with ``cl.Program(ctx, source).build()`` (or pyopencl's ``ElementwiseKernel``
and ``ReductionKernel``), moves its inputs into ``cl.Buffer`` objects (``COPY_HOST_PTR`` or ``USE_HOST_PTR``
over ``tensor.numpy()``), enqueues its kernels and reads the result back into a torch tensor. Its tensors
stay on the CPU whatever device runs the kernels, so the harness times host wall time with every queue the
candidate used finished (`kforge.backends.clocks.OpenClClock`).

Where it runs: on any machine through PoCL, the portable CPU implementation (pip's
``pocl-binary-distribution``, which pyopencl's bundled ICD loader finds by itself: CI runs this backend
on every change); on an NVIDIA GPU through the driver's OpenCL (``libnvidia-opencl.so.1``) when the driver
ships it and an ICD file names it: ``options.platform=nvidia`` picks that platform, ``options.icd`` names the
library when no ``/etc/OpenCL/vendors/*.icd`` does, and ``options.gpu`` makes that GPU visible to the CPU slot
the candidate runs in. The GPU path is untested until run on a GPU machine; the pool does not schedule that
GPU, so its timings are only as quiet as the machine is.

What counts as the candidate's work: launches of kernels from programs its own file built (a ``cl.Program``
it constructed, an ``ElementwiseKernel``/``ReductionKernel`` it defined); pyopencl's array arithmetic is a
library's (`kforge.sandbox.opencl_hooks`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .base import Backend, WorkerContext

#: OpenCL platforms' build failures (pyopencl raises RuntimeError with the driver's status name).
_BUILD_FAILED = ("BUILD_PROGRAM_FAILURE", "clBuildProgram failed", "COMPILE_PROGRAM_FAILURE", "INVALID_PROGRAM_EXECUTABLE")


class OpenClBackend(Backend):
    name = "opencl"
    language = ("OpenCL C kernels, built with pyopencl (cl.Program(ctx, src).build()) and enqueued on cl.Buffer "
                "objects over torch CPU tensors' memory")
    default_device = "cpu"
    kernel_patterns = (r"__kernel\b", r"\bkernel\s+void\b", r"\bElementwiseKernel\s*\(", r"\bReductionKernel\s*\(")
    kernel_hint = ("an OpenCL C kernel (__kernel void ...) built with pyopencl's cl.Program(...).build() and enqueued "
                   "from forward")

    def __init__(self, device: str | None = None, **options):
        if device not in (None, "cpu"):
            raise ValueError(f"the opencl backend's tensors are on the CPU (device=cpu), not {device!r}: the OpenCL "
                             "device is chosen with options.platform (e.g. 'nvidia' or 'portable' for PoCL)")
        super().__init__(device, **options)

    @property
    def platform(self) -> str:
        """A piece of the OpenCL platform's name to use ('' for the first one the ICD loader lists)."""
        return str(self.options.get("platform") or "")

    def describe(self) -> str:
        where = f"platform '{self.platform}'" if self.platform else "the first OpenCL platform (PoCL on a CPU)"
        return f"{self.name} (OpenCL C on {where}; tensors on the cpu)"

    def prepare(self, ctx: WorkerContext) -> None:
        """Point the OpenCL runtime where the backend's options say, before the candidate's first platform query
        (the ICD loader and PoCL read their variables then; this process made no OpenCL call yet)."""
        # PoCL caches every program it builds, keyed by source, options and device: in kforge's cache, so the
        # run finds what the build phase built. (NVIDIA's driver caches in CUDA_CACHE_PATH itself.)
        os.environ["POCL_CACHE_DIR"] = str(Path(ctx.cache_dir) / "pocl")
        os.environ["PYOPENCL_COMPILER_OUTPUT"] = "0"  # build warnings would fill the worker's log
        if self.platform:  # create_some_context() reads it, and never prompts in a worker (no terminal)
            os.environ["PYOPENCL_CTX"] = self.platform
        icd = self.options.get("icd")
        if icd:  # a vendor library no ICD file names (a container with the driver's OpenCL but no vendors dir)
            vendors = Path(ctx.cache_dir) / "opencl-vendors"
            vendors.mkdir(parents=True, exist_ok=True)
            (vendors / f"{Path(str(icd)).name}.icd").write_text(str(icd) + "\n")
            os.environ["OCL_ICD_VENDORS"] = str(vendors)
        gpu = self.options.get("gpu")
        if gpu is not None and not ctx.build_only:
            # Candidates' tensors are on the CPU, so they run in CPU slots, which hide every GPU from CUDA
            # (CUDA_VISIBLE_DEVICES=""); NVIDIA's OpenCL reads the same variable when it starts in this process.
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)

    def make_clock(self, flush_bytes: int):
        from .clocks import OpenClClock
        return OpenClClock()

    def classify(self, exc: BaseException) -> str | None:
        text = str(exc)
        if type(exc).__module__.startswith("pyopencl") and any(s in text for s in _BUILD_FAILED):
            return "compilation_failure"
        return None

    def hint(self, kind: str, source: str, message: str, precision: str) -> str:
        if kind == "runtime" and "INVALID_WORK_GROUP_SIZE" in message:
            return (" (OpenCL 1.2 needs the global size to be a multiple of the work-group size given: round the "
                    "global size up to a multiple and guard the tail in the kernel, `if (i < n)`, or pass None as the "
                    "local size)")
        return ""

    def quoted(self, exc: BaseException) -> BaseException:
        """A failed build's first compiler error, not pyopencl's "clBuildProgram failed: BUILD_PROGRAM_FAILURE"
        said three times (the log follows it in the exception's text)."""
        first = re.search(r"^error: (?:\S+?\.cl:)?(\d+:\d+: )?(.+)$", str(exc), re.MULTILINE)
        if self.classify(exc) != "compilation_failure" or first is None:
            return exc
        said = f"{first.group(2)} (line:column {first.group(1).strip(': ')} of the kernel source)" if first.group(1) \
            else first.group(2)
        if "cl_khr_fp16" in str(exc) or re.search(r"\bhalf\b.*not allowed", said):  # PoCL on a CPU lacks it
            said += ("; this OpenCL device has no cl_khr_fp16, so `half` is for storage only: load with vload_half, "
                     "compute in float, store with vstore_half")
        return RuntimeError(said)

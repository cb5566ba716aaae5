"""The candidate's OpenCL work, seen through pyopencl: installed by `Recorder` once pyopencl is imported.

Every kernel launch, whichever way the candidate writes it (``prg.name(queue, ...)``, ``cl.Kernel(prg, name)``,
``knl.set_args`` then ``cl.enqueue_nd_range_kernel``, an ``ElementwiseKernel``), reaches
``pyopencl._cl.enqueue_nd_range_kernel``, and every copy between buffers and host memory one of pyopencl's
``_enqueue_*_buffer`` functions: those are wrapped. A launch is the candidate's own when its kernel comes from
a program the candidate's file built (a ``cl.Program`` it constructed, or one built inside a kernel object it
defined: ``ElementwiseKernel``, ``ReductionKernel``, the scan kernels); pyopencl's own array arithmetic is a
library's. Outside the two attribution trials a hook costs a flag test and remembers the queue, so the
clock (`kforge.backends.clocks.OpenClClock`) can wait for it.

In the *profile* trial a launch waits for its event inside its ``record_function`` range
(``kforge::opencl::NAME`` for the candidate's, ``pyopencl::NAME`` for the library's), so the range's time is
the kernel's; in the *dataflow* trial the buffers a launch was given are fingerprinted (read back) before and
after it, and copies carry "derived from the candidate's kernels" between buffers and host memory
(`kforge.verify.dataflow.Dataflow.transfer`). Images are not followed: a kernel writing one makes the dataflow
undetermined.
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any, Callable

import numpy as np

from ..backends.clocks import OPENCL_QUEUES
from .tripwire import CANDIDATE_FILE

#: pyopencl's kernel objects that compile what the candidate writes: one it constructs is its kernel.
KERNEL_TYPES = (("pyopencl.elementwise", "ElementwiseKernel"), ("pyopencl.reduction", "ReductionKernel"),
                ("pyopencl.scan", "GenericScanKernel"), ("pyopencl.scan", "InclusiveScanKernel"),
                ("pyopencl.scan", "ExclusiveScanKernel"))
#: Copies between a buffer and the host: (function, index of the buffer, index of the host array, host is dst).
HOST_COPIES = (("_enqueue_read_buffer", 1, 2, True), ("_enqueue_read_buffer_rect", 1, 2, True),
               ("_enqueue_write_buffer", 1, 2, False), ("_enqueue_write_buffer_rect", 1, 2, False))
IMAGE_WRITES = ("_enqueue_write_image", "_enqueue_copy_image", "_enqueue_copy_buffer_to_image", "enqueue_fill_image")


def _from_candidate(depth: int) -> bool:
    """Whether the function ``depth`` frames above the caller is the candidate's own code."""
    frame = sys._getframe(depth + 1)
    return os.path.basename(frame.f_code.co_filename) == CANDIDATE_FILE


class _Buffer:
    """An OpenCL buffer as the dataflow sees it: a key, its contents' digest (read back), the host memory it
    aliases (``USE_HOST_PTR``)."""

    def __init__(self, hooks: "OpenClHooks", buf: Any, queue: Any):
        self.hooks, self.buf, self.queue = hooks, buf, queue
        self.key = ("opencl", buf.int_ptr)
        self.host = None
        if buf.flags & hooks.cl.mem_flags.USE_HOST_PTR and getattr(buf, "hostbuf", None) is not None:
            self.host = _Host(buf.hostbuf)

    def fingerprint(self) -> bytes:
        return hashlib.blake2b(self.contents(), digest_size=16).digest()

    def contents(self) -> np.ndarray:
        """The buffer's bytes, read back."""
        data = np.empty(self.buf.size, dtype=np.uint8)
        self.hooks.read(self.queue, self.buf, data, 0, None, True)
        return data


class _Host:
    """Host memory a copy reads or writes: its address, size, the address of the NumPy array it views."""

    def __init__(self, obj: Any):
        arr = obj if isinstance(obj, np.ndarray) else np.frombuffer(obj, dtype=np.uint8)
        self.array = arr
        self.address = int(arr.__array_interface__["data"][0])
        self.nbytes = int(arr.nbytes)
        base = arr
        while isinstance(base.base, np.ndarray):
            base = base.base
        self.base = int(base.__array_interface__["data"][0])

    def fingerprint(self) -> bytes:
        data = self.array if self.array.flags.c_contiguous else np.ascontiguousarray(self.array)
        return hashlib.blake2b(data.reshape(-1).view(np.uint8), digest_size=16).digest()


class OpenClHooks:
    """Wraps pyopencl for one worker process; `Recorder` owns the mode and the counts."""

    def __init__(self, rec: Any):
        self.rec = rec
        self.own_programs: set[int] = set()
        """``cl_program`` handles of the programs the candidate built."""
        self.depth = 0
        """Inside a call into a kernel object the candidate defined: programs built here are its own."""

    def install(self) -> None:
        import pyopencl as cl
        import pyopencl._cl as _cl
        if getattr(_cl.enqueue_nd_range_kernel, "_kforge", False):
            return
        self.cl, self._cl = cl, _cl
        self.read = _cl._enqueue_read_buffer  # the original, for fingerprints
        self._wrap_programs(cl)
        self._wrap_kernel_types()
        self._wrap_kernel_args(_cl)
        launch = self._launch(_cl.enqueue_nd_range_kernel)
        _cl.enqueue_nd_range_kernel = cl.enqueue_nd_range_kernel = launch
        for name, buf_at, host_at, host_is_dst in HOST_COPIES:
            setattr(_cl, name, self._host_copy(getattr(_cl, name), buf_at, host_at, host_is_dst))
        for name in ("_enqueue_copy_buffer", "_enqueue_copy_buffer_rect"):
            setattr(_cl, name, self._buffer_copy(getattr(_cl, name)))
        _cl._enqueue_fill_buffer = self._fill(_cl._enqueue_fill_buffer)
        mapped = self._map(_cl.enqueue_map_buffer)
        _cl.enqueue_map_buffer = cl.enqueue_map_buffer = mapped
        for name in IMAGE_WRITES:
            if hasattr(_cl, name):
                setattr(_cl, name, self._image_write(getattr(_cl, name), name))

    # -- whose kernels ------------------------------------------------------------------------------
    def _wrap_programs(self, cl: Any) -> None:
        hooks, init, build = self, cl.Program.__init__, cl.Program.build

        def program_init(prg, *args, **kwargs):
            init(prg, *args, **kwargs)
            prg._kforge_own = hooks.depth > 0 or _from_candidate(1)

        def program_build(prg, *args, **kwargs):
            out = build(prg, *args, **kwargs)
            if getattr(prg, "_kforge_own", False):
                hooks.own_programs.add(prg.int_ptr)
            return out
        cl.Program.__init__, cl.Program.build = program_init, program_build

    def _wrap_kernel_types(self) -> None:
        import importlib
        hooks = self
        for module_name, cls_name in KERNEL_TYPES:
            try:
                cls = getattr(importlib.import_module(module_name), cls_name)
            except (ImportError, AttributeError):
                continue
            init, call = cls.__init__, cls.__call__

            def own_init(obj, *args, _init=init, **kwargs):
                obj._kforge_own = hooks.depth > 0 or _from_candidate(1)
                return hooks._inside(obj, lambda: _init(obj, *args, **kwargs))

            def own_call(obj, *args, _call=call, **kwargs):
                return hooks._inside(obj, lambda: _call(obj, *args, **kwargs))
            cls.__init__, cls.__call__ = own_init, own_call

    def _inside(self, obj: Any, run: Callable[[], Any]) -> Any:
        if not getattr(obj, "_kforge_own", False):
            return run()
        self.depth += 1
        try:
            return run()
        finally:
            self.depth -= 1

    def _own(self, kernel: Any) -> bool:
        own = getattr(kernel, "_kforge_own", None)
        if own is None:
            own = kernel.get_info(self.cl.kernel_info.PROGRAM).int_ptr in self.own_programs
            kernel._kforge_own = own
        return own

    def _wrap_kernel_args(self, _cl: Any) -> None:
        """Remember each kernel's arguments, however they were set, for the dataflow to fingerprint."""
        call, set_arg, set_args = _cl.Kernel.__call__, _cl.Kernel.set_arg, _cl.Kernel.set_args

        def kernel_call(kernel, queue, global_size, local_size, *args, **kwargs):
            kernel._kforge_args = dict(enumerate(args))
            return call(kernel, queue, global_size, local_size, *args, **kwargs)

        def kernel_set_arg(kernel, index, value):
            kernel.__dict__.setdefault("_kforge_args", {})[index] = value
            return set_arg(kernel, index, value)

        def kernel_set_args(kernel, *args):
            kernel._kforge_args = dict(enumerate(args))
            return set_args(kernel, *args)
        _cl.Kernel.__call__, _cl.Kernel.set_arg, _cl.Kernel.set_args = kernel_call, kernel_set_arg, kernel_set_args

    # -- launches -----------------------------------------------------------------------------------
    def _launch(self, enqueue: Callable) -> Callable:
        hooks, rec = self, self.rec

        def launch(queue, kernel, *args, **kwargs):
            OPENCL_QUEUES.setdefault(id(queue), queue)
            if rec.mode is None:
                return enqueue(queue, kernel, *args, **kwargs)

            def run():
                event = enqueue(queue, kernel, *args, **kwargs)
                event.wait()  # the profile range times the kernel; the dataflow reads what it wrote
                return event
            name = kernel.function_name
            memories, hosts = hooks._memories(kernel, queue)
            if hooks._own(kernel):
                return rec.call(run, f"opencl::{name}", tuple(hosts), {}, tuple(memories))
            if rec.mode == "profile":
                from torch.profiler import record_function
                with record_function(f"pyopencl::{name}"):
                    return run()
            if rec.flow is not None:
                return rec.flow.library_call(run, memories)
            return run()
        launch._kforge = True
        return launch

    def _memories(self, kernel: Any, queue: Any) -> tuple[list[_Buffer], list[int]]:
        """The buffers a launch was given, and the host addresses of its SVM arguments."""
        if self.rec.mode != "dataflow" or self.rec.flow is None:
            return [], []
        cl, buffers, hosts = self.cl, [], []
        for value in getattr(kernel, "_kforge_args", {}).values():
            value = getattr(value, "base_data", value)  # a pyopencl Array: its buffer
            if isinstance(value, self._cl.MemoryObjectHolder):
                if value.type == cl.mem_object_type.BUFFER:
                    buffers.append(_Buffer(self, value, queue))
                else:
                    self.rec.flow.untraced("an OpenCL image")
            elif isinstance(getattr(value, "mem", None), np.ndarray):  # cl.SVM over a host array
                hosts.append(_Host(value.mem).address)
        return buffers, hosts

    # -- copies -------------------------------------------------------------------------------------
    def _tracing(self, queue: Any) -> Any:
        OPENCL_QUEUES.setdefault(id(queue), queue)
        return self.rec.flow if self.rec.mode == "dataflow" else None

    def _host_copy(self, copy: Callable, buf_at: int, host_at: int, host_is_dst: bool) -> Callable:
        hooks = self

        def host_copy(*args, **kwargs):
            flow = hooks._tracing(args[0])
            if flow is None or len(args) <= host_at:
                return copy(*args, **kwargs)
            buf, host = _Buffer(hooks, args[buf_at], args[0]), _Host(args[host_at])
            run = lambda: _waited(copy(*args, **kwargs))  # noqa: E731
            return flow.transfer(run, host, buf) if host_is_dst else flow.transfer(run, buf, host)
        return host_copy

    def _buffer_copy(self, copy: Callable) -> Callable:
        hooks = self

        def buffer_copy(queue, src, dst, *args, **kwargs):
            flow = hooks._tracing(queue)
            if flow is None:
                return copy(queue, src, dst, *args, **kwargs)
            return flow.transfer(lambda: _waited(copy(queue, src, dst, *args, **kwargs)),
                                 _Buffer(hooks, dst, queue), _Buffer(hooks, src, queue))
        return buffer_copy

    def _fill(self, fill: Callable) -> Callable:
        hooks = self

        def fill_buffer(queue, mem, *args, **kwargs):
            flow = hooks._tracing(queue)
            out = fill(queue, mem, *args, **kwargs)
            if flow is not None:
                flow.opaque[("opencl", mem.int_ptr)] = False  # a constant: nothing of the kernels' in it
            return out
        return fill_buffer

    def _map(self, map_buffer: Callable) -> Callable:
        hooks = self

        def mapped(queue, buf, *args, **kwargs):
            flow = hooks._tracing(queue)
            out = map_buffer(queue, buf, *args, **kwargs)
            if flow is not None:  # the array is the buffer's memory, as the host sees it
                array = out[0] if isinstance(out, tuple) else out
                flow.transfer(lambda: None, _Host(array), _Buffer(hooks, buf, queue))
            return out
        return mapped

    def _image_write(self, write: Callable, name: str) -> Callable:
        hooks = self

        def image_write(queue, *args, **kwargs):
            flow = hooks._tracing(queue)
            if flow is not None:
                flow.untraced(f"an OpenCL image ({name.lstrip('_')})")
            return write(queue, *args, **kwargs)
        return image_write


def _waited(event: Any) -> Any:
    wait = getattr(event, "wait", None)
    if wait is not None:
        wait()
    return event

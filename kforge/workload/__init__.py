"""Whole-workload mode: profile a model by module, extract its hot modules as problems, put kernels back
(see docs/workload.md).

Importing any part of it registers the worker's ``workload_profile`` request kind, before any pool starts.
"""

from ..sandbox.dispatch import register

register("workload_profile", "kforge.workload.worker:run_in_worker")

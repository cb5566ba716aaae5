"""The child side of `kernelbench_agreement.py`: what runs inside the process KernelBench's code runs in.

    python benchmarks/kernelbench_agreement_child.py build|eval JOB.json RESULT.json

GPU machine only. ``build`` runs KernelBench's precompile of one candidate, ``eval`` its
``eval_kernel_against_ref`` with the job's backend (``cuda`` or ``triton``) and precision (``fp32``, ``bf16``,
``fp16``: KernelBench's ``precision`` dtype, also used for its reference timing); each writes one JSON record.
KernelBench is imported from the checkout the job names (``src/`` put on ``sys.path``); nothing of it is
copied here. Its package ``__init__`` imports ``kernelbench.utils``, which imports the LLM clients ``openai``
and ``litellm`` (and ``dotenv``) at module level for its generation scripts; evaluation never calls them, so
stand-ins take their place (``dotenv`` only where it is not installed).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

#: Modules kernelbench.utils imports for generation only: replaced always (importing litellm costs seconds
#: in each of the many child processes) or, for dotenv, only where it is missing.
STAND_INS = {"openai": ("OpenAI",), "litellm": ("completion",)}
STAND_INS_IF_MISSING = {"dotenv": ("load_dotenv",)}


def _stand_in(name: str, attrs: tuple[str, ...]) -> None:
    mod = types.ModuleType(name)
    mod.__doc__ = "stand-in installed by kernelbench_agreement.py: KernelBench's evaluation never calls it"

    def unavailable(*_a, _what=name, **_k):
        raise RuntimeError(f"{_what} is a stand-in in kernelbench_agreement.py (generation is not run here)")
    for a in attrs:
        setattr(mod, a, unavailable)
    sys.modules[name] = mod


def install_stand_ins() -> list[str]:
    """Put stand-ins where kernelbench.utils imports generation-only modules; returns their names."""
    done = []
    for name, attrs in STAND_INS.items():
        _stand_in(name, attrs)
        done.append(name)
    for name, attrs in STAND_INS_IF_MISSING.items():
        if importlib.util.find_spec(name) is None:
            _stand_in(name, attrs)
            done.append(name)
    return done


def import_kernelbench(kernelbench: str):
    """KernelBench's eval, utils and timing modules from ``kernelbench/src`` (stand-ins installed first)."""
    sys.path.insert(0, str(Path(kernelbench) / "src"))
    install_stand_ins()
    import kernelbench.eval as kb_eval
    import kernelbench.timing as kb_timing
    import kernelbench.utils as kb_utils
    return kb_eval, kb_utils, kb_timing


#: The job's precision name -> the dtype KernelBench's eval and timing take.
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def precision_dtype(name: str):
    """``bf16`` -> ``torch.bfloat16`` (an unknown name is an error, not a silent fp32)."""
    import torch
    if name not in DTYPES:
        raise ValueError(f"precision {name!r} is not one of {', '.join(DTYPES)}")
    return getattr(torch, DTYPES[name])


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def child_build(job: dict[str, Any]) -> dict[str, Any]:
    """GPU machine only: KernelBench's precompile of one candidate, then ``ModelNew`` built once."""
    kb_eval, kb_utils, _ = import_kernelbench(job["kernelbench"])
    kb_utils.set_gpu_arch(job["gpu_arch"])
    src = Path(job["candidate"]).read_text()
    ok, log, err = kb_eval.build_compile_cache(custom_model_src=src, verbose=False, build_dir=job["build_dir"])
    rec: dict[str, Any] = {"compiled": bool(ok), "error": err, "log": (log or "")[-2000:]}
    if ok and job.get("warm_init", True):
        import torch
        try:
            Model, get_init_inputs, _ = kb_eval.load_original_model_and_inputs(Path(job["problem"]).read_text(), {})
            kb_eval.set_seed(job["seed"])
            init = get_init_inputs()
            ModelNew = kb_eval.load_custom_model(src, {}, job["build_dir"])
            with torch.no_grad():
                kb_eval.set_seed(job["seed"])
                ModelNew(*init)
            rec["warm_init"] = "ok"
        except Exception as exc:  # noqa: BLE001 - only a cache warm-up; the eval step decides
            rec["warm_init"] = f"{type(exc).__name__}: {exc}"[:500]
    return rec


def child_eval(job: dict[str, Any]) -> dict[str, Any]:
    """GPU machine only: KernelBench's ``eval_kernel_against_ref``, recorded as eval_from_generations does."""
    import torch
    kb_eval, kb_utils, kb_timing = import_kernelbench(job["kernelbench"])
    kb_utils.set_gpu_arch(job["gpu_arch"])
    ref_src, src = Path(job["problem"]).read_text(), Path(job["candidate"]).read_text()
    device = torch.device("cuda:0")
    dtype = precision_dtype(job.get("precision", "fp32"))
    try:
        res = kb_eval.eval_kernel_against_ref(
            original_model_src=ref_src, custom_model_src=src, seed_num=job["seed"],
            num_correct_trials=job["trials"], num_perf_trials=job["timed"], measure_performance=True,
            timing_method="cuda_event", verbose=False, build_dir=job["build_dir"], device=device,
            backend=job.get("backend", "cuda"), precision=dtype)
    except Exception as exc:  # noqa: BLE001 - KernelBench's evaluate_single_sample records these the same way
        kind = "cuda_error" if "CUDA error" in str(exc) else "other_error"
        return {"status": "result", "compiled": False, "correctness": False,
                "metadata": {kind: f"{type(exc).__name__}: {exc}"[:2000], f"{kind}_name": kb_eval.get_error_name(exc)}}
    if res is None:
        return {"status": "none", "error": "eval_kernel_against_ref returned None (a lock-file error while building)"}
    ref_ms = getattr(res, "ref_runtime", -1.0)  # older KernelBench results have no reference timing
    rec = {"status": "result", "backend": job.get("backend", "cuda"), "precision": job.get("precision", "fp32"),
           "compiled": res.compiled, "correctness": res.correctness, "runtime": res.runtime, "ref_runtime": ref_ms,
           "runtime_stats": _plain(res.runtime_stats), "metadata": _plain(res.metadata),
           "ref_runtime_stats": _plain(getattr(res, "ref_runtime_stats", {})),
           "ref_timing_from": "eval_kernel_against_ref" if ref_ms and ref_ms > 0 else None}
    if res.correctness and not (ref_ms and ref_ms > 0):
        stats = kb_timing.measure_ref_program_time(Path(job["problem"]).stem, ref_src, num_trials=job["timed"],
                                                   device=device, precision=dtype)
        if stats:
            rec.update(ref_runtime=stats["mean"], ref_runtime_stats=_plain(stats),
                       ref_timing_from="measure_ref_program_time")
    return rec


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("build", "eval"):
        print(__doc__, file=sys.stderr)
        return 2
    kind, job_file, result_file = argv
    job = json.loads(Path(job_file).read_text())
    rec = child_build(job) if kind == "build" else child_eval(job)
    Path(result_file).write_text(json.dumps(_plain(rec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

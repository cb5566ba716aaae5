"""KernelBench from its Hugging Face dataset (``ScalingIntelligence/KernelBench``), downloaded once.

The dataset's parquet files are fetched with huggingface_hub (its cache makes later runs offline) and
written out as a KernelBench-layout directory under kforge's cache, which `load_directory` reads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .. import cache_dir
from .problem import Problem, ProblemError
from .suite import load_directory

DATASET = "ScalingIntelligence/KernelBench"


def _download(dataset: str) -> Path:
    from huggingface_hub import snapshot_download
    kwargs = dict(repo_id=dataset, repo_type="dataset", allow_patterns=["*.parquet"])
    try:
        return Path(snapshot_download(local_files_only=True, **kwargs))
    except Exception:  # noqa: BLE001 - not cached yet: go online
        pass
    try:
        return Path(snapshot_download(**kwargs))
    except Exception as exc:  # noqa: BLE001 - offline, proxy, auth: all end in the same advice
        raise ProblemError(
            f"cannot download the KernelBench dataset {dataset!r} from Hugging Face ({type(exc).__name__}: "
            f"{str(exc)[:200]}). If this machine is offline, clone https://github.com/ScalingIntelligence/KernelBench "
            "elsewhere, copy it here and use problems=kernelbench problems.root=PATH") from None


def write_layout(rows: list[dict[str, Any]], root: Path) -> Path:
    """Write dataset rows (``code``, ``level``, ``name``, ``problem_id``) as ``root/levelN/ID_Name.py``."""
    for row in rows:
        level, pid = int(row["level"]), int(row["problem_id"])
        stem = re.sub(r"\.py$", "", str(row["name"]))
        if not re.match(rf"^{pid}_", stem):
            stem = f"{pid}_{stem}"
        stem = re.sub(r"[^\w\-]", "_", stem)
        path = root / f"level{level}" / f"{stem}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != row["code"]:
            path.write_text(row["code"])
    return root


def dataset_rows(snapshot: Path) -> list[dict[str, Any]]:
    import pandas as pd
    files = sorted(snapshot.rglob("*.parquet"))
    if not files:
        raise ProblemError(f"{snapshot}: the downloaded dataset holds no parquet files")
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    missing = {"code", "level", "name", "problem_id"} - set(frame.columns)
    if missing:
        raise ProblemError(f"the KernelBench dataset lacks columns {sorted(missing)} (has {list(frame.columns)})")
    return frame.to_dict("records")


def load_huggingface(dataset: str = DATASET, *, levels: Any = None, ids: Any = None, size: str | None = None,
                     overrides: dict[str, Any] | None = None) -> list[Problem]:
    root = cache_dir() / "kernelbench-hf" / dataset.replace("/", "__")
    write_layout(dataset_rows(_download(dataset)), root)
    return load_directory(root, levels=levels, ids=ids, size=size, overrides=overrides)

"""The ``workload`` group of ``kforge-synthesize`` (``conf/workload/*.yaml``), and ``workload=FILE.py``.

``workload=transformer_block`` picks a file of ``conf/workload/``. ``workload=path/to/model.py`` names a model
file: before Hydra composes, every such value is registered as a config of its own (the defaults below with
that ``model``), as `kforge.apps.hydra_conf` does for ``model=PROVIDER/MODEL``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ..strict import StrictConfig

CONF_GROUP = "workload"


@dataclass
class WorkloadConfig(StrictConfig):
    """Whole-workload mode: the job's problems are a model's hot regions (docs/workload.md)."""

    model: str | None = None
    """A KernelBench-format model file or a built-in workload's name (``transformer_block``); None: an ordinary job."""
    size: str | None = None
    """The model's size preset; None: ``problems.size``, else cpu on the cpu device and gpu on GPUs."""
    dir: str | None = None
    """Where the extraction goes; one holding this model's ``workload.json`` is reused. None: the job's output dir."""
    top: int | None = None
    """At most this many regions (None: as many as ``cover`` needs)."""
    cover: float = 0.8
    """Stop taking regions once they cover this share of the model's time."""
    min_share: float = 0.0
    """Leave out regions with this share of the model's time or less."""
    iterations: int = 3
    """Profiled forward calls of the model."""

    def __post_init__(self):
        if self.model is not None and not str(self.model).strip():
            raise ValueError("workload.model is empty: name a model file or a built-in workload, or use workload=none")
        if not 0 < self.cover <= 1:
            raise ValueError(f"workload.cover is a share of the model's time, in (0, 1], not {self.cover}")
        if self.top is not None and self.top < 1:
            raise ValueError(f"workload.top must be at least 1, not {self.top}")
        if self.iterations < 1:
            raise ValueError(f"workload.iterations must be at least 1, not {self.iterations}")


def workload_files(overrides: list[str], conf_dir: Path) -> list[str]:
    """The ``workload=`` values among Hydra overrides (a choice sweep's too) that are no file of ``conf_dir/workload``."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    candidates = [o for o in overrides if not o.startswith("-") and o.split("=", 1)[0].lstrip("+~") == CONF_GROUP]
    parser, out = OverridesParser.create(), []
    for text in candidates:
        try:
            parsed = parser.parse_overrides([text])
        except Exception:  # noqa: BLE001 - a malformed override: Hydra itself says what is wrong with it
            continue
        for o in parsed:
            value = o.value()
            values = list(getattr(value, "list", None) or []) if o.is_sweep_override() else [value]
            out += [v for v in values if isinstance(v, str) and (v.endswith(".py") or "/" in v)
                    and not (conf_dir / CONF_GROUP / f"{v}.yaml").is_file()]
    return out


def register_workload_files(overrides: list[str], conf_dir: Path) -> list[str]:
    """Make ``workload=FILE.py`` (relative or absolute) a valid choice for every such value in ``overrides``."""
    from hydra.core.config_store import ConfigStore
    found = workload_files(overrides, conf_dir)
    for value in found:
        folder, _, name = value.rpartition("/")
        # Hydra looks the choice up as workload/<value>, skipping empty parts (an absolute path's leading /).
        group = "/".join(p for p in (CONF_GROUP, *folder.split("/")) if p)
        ConfigStore.instance().store(group=group, name=name, node=asdict(WorkloadConfig(model=value)),
                                     package=CONF_GROUP)
    return found

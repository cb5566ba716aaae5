"""Hydra's view of kforge's configs: where they are, and ``model=PROVIDER/MODEL`` for any litellm model.

Hydra reads ``model=X`` as the file ``conf/model/X.yaml``. A litellm model string names its provider
(``openai/gpt-5``, ``anthropic/claude-opus-4-5``, ``hosted_vllm/Qwen/Qwen2.5-Coder-32B-Instruct``), so
before Hydra composes, every ``model=`` value with a ``/`` that is not such a file is registered as a
config of its own: the generic litellm model (``conf/model/litellm.yaml``) with that string. Sweeps
(``-m model=gpt-5,openai/gpt-4o``) work the same, launchers included (they carry Hydra's config store
to their jobs). A name without a ``/`` must be a file, so a typo is still answered with the choices.
"""

from __future__ import annotations

from typing import Any

from .. import DATA_DIR

CONF_DIR = DATA_DIR / "conf"


def model_strings(overrides: list[str]) -> list[str]:
    """The ``model=`` values among Hydra overrides (a choice sweep's too) that are litellm model strings."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    candidates = [o for o in overrides if not o.startswith("-") and o.split("=", 1)[0].lstrip("+~") == "model"]
    if not candidates:
        return []
    parser, parsed = OverridesParser.create(), []
    for text in candidates:
        try:
            parsed += parser.parse_overrides([text])
        except Exception:  # noqa: BLE001 - a malformed override: Hydra itself says what is wrong with it
            continue
    out: list[str] = []
    for o in parsed:
        value = o.value()
        values = list(getattr(value, "list", None) or []) if o.is_sweep_override() else [value]
        out += [v for v in values if isinstance(v, str) and "/" in v and not (CONF_DIR / "model" / f"{v}.yaml").is_file()]
    return out


def generic_model(model: str) -> dict[str, Any]:
    """The config of a litellm model given by its string alone (what ``conf/model/litellm.yaml`` makes)."""
    return {"name": model, "kind": "litellm", "model": model}


def register_model_strings(overrides: list[str]) -> list[str]:
    """Make ``model=PROVIDER/MODEL`` a valid choice for every such value in ``overrides``."""
    from hydra.core.config_store import ConfigStore
    found = model_strings(overrides)
    for model in found:
        group, _, name = model.rpartition("/")
        ConfigStore.instance().store(group=f"model/{group}", name=name, node=generic_model(model), package="model")
    from ..workload.config import register_workload_files
    register_workload_files(overrides, CONF_DIR)  # and workload=FILE.py, a model file (kforge/workload/config.py)
    return found


def compose(config_name: str, overrides: list[str]):
    """The composed config, as the Hydra entry point would see it (for tests and scripts)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    register_model_strings(overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name, overrides=overrides)

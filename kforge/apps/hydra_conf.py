"""Hydra's view of kforge's configs: where they are, and ``model=PROVIDER/MODEL`` for any litellm model.

Hydra reads ``model=X`` as the file ``conf/model/X.yaml``. A litellm model string names its provider
(``openai/gpt-5``, ``anthropic/claude-opus-4-5``, ``hosted_vllm/Qwen/Qwen2.5-Coder-32B-Instruct``), so
before Hydra composes, every ``model=`` value with a ``/`` that is not such a file is registered as a
config of its own: the generic litellm model (``conf/model/litellm.yaml``) with that string. Sweeps
(``-m model=gpt-5,openai/gpt-4o``) work the same, launchers included (they carry Hydra's config store
to their jobs). A name without a ``/`` must be a file, so a typo is still answered with the choices:
`check_choices` answers an unknown choice of any group (``backend=metal``, ``model=gtp-5``) before Hydra composes,
and `discard_run_dir` takes back the folder Hydra made for a job that was refused before it ran.
"""

from __future__ import annotations

import difflib
import re
import shutil
from pathlib import Path
from typing import Any

from .. import DATA_DIR
from ..errors import ConfigError

CONF_DIR = DATA_DIR / "conf"
#: Folders of ``conf/`` that are Hydra's own, not a kforge group (``hydra/launcher=joblib`` is Hydra's to check).
HYDRA_GROUPS = ("hydra",)


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


def model_config(name: str) -> dict[str, Any]:
    """A ``--models`` entry: a conf/model name, or a litellm model string with its provider."""
    from omegaconf import OmegaConf
    path = CONF_DIR / "model" / f"{name}.yaml"
    if path.is_file():
        return OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if "/" in name:
        return generic_model(name)
    known = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml") if p.stem != "litellm")
    raise ConfigError(f"unknown model {name!r}: choose from {', '.join(known)}, or give a litellm model "
                      "string with its provider (e.g. openai/gpt-5, anthropic/claude-opus-4-5)")


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


def user_config_dirs(argv: list[str]) -> list[Path]:
    """The config folders a command line adds to kforge's own: ``--config-dir``/``-cd DIR`` (or ``=DIR``), and the
    ``file://`` (or plain) entries of ``hydra.searchpath=[...]``; a ``pkg://`` entry is not a folder, so not read."""
    dirs: list[str] = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in ("--config-dir", "-cd"):
            dirs += [value] if eq else argv[i + 1:i + 2]
        elif flag.lstrip("+") == "hydra.searchpath" and eq:
            dirs += [e.strip().strip("'\"") for e in value.strip("[]").split(",") if e.strip()]
    return [Path(d.removeprefix("file://")) for d in dirs if d and "://" not in d.removeprefix("file://")]


def _group_choices(conf_dir: Path, group: str, extra: list[Path] = ()) -> list[str]:
    return sorted({p.stem for d in [conf_dir, *extra] for p in (d / group).glob("*.yaml")})


def _free_form(group: str, value: str) -> bool:
    """A choice that names no file of the group yet is valid: a litellm model string, a workload's model file."""
    if group == "model":
        return "/" in value
    return group == "workload" and (value.endswith(".py") or "/" in value)


def check_choices(overrides: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Answer an unknown choice of a config group among Hydra command-line ``overrides`` (``backend=metal``,
    ``problems=builtin_l9``, ``experiment=nope``, one value of a sweep) with `ConfigError` naming the group's
    choices, before Hydra composes (it would print its config search path and exit 1). A bare model name must be
    a file of ``conf/model`` or of a config folder the command line adds (`user_config_dirs`: a user's own
    ``model=myscript``); one with a ``/`` is a litellm model string."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    extra = user_config_dirs(overrides)
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir() and p.name not in HYDRA_GROUPS}
    given = [o for o in overrides if "=" in o and not o.startswith("-") and o.split("=", 1)[0].lstrip("+~")
             .split("@", 1)[0] in groups]
    for override in OverridesParser.create().parse_overrides(given):
        if override.is_delete():
            continue
        group, value = override.key_or_group, override.value()
        values = list(getattr(value, "list", None) or []) if override.is_sweep_override() else [value]
        for v in values:
            if v is None or not isinstance(v, str) or _free_form(group, v) or \
                    any((d / group / f"{v}.yaml").is_file() for d in [conf_dir, *extra]):
                continue
            choices = _group_choices(conf_dir, group, extra)
            near = difflib.get_close_matches(v, choices, n=1)
            also = ", or any litellm model string with its provider (openai/gpt-5, anthropic/claude-opus-4-5)" \
                if group == "model" else ", or a model file (workload=my_model.py)" if group == "workload" else ""
            raise ConfigError(f"unknown choice {group}={v}{f' (did you mean {group}={near[0]}?)' if near else ''}; "
                              f"valid {group} choices: {', '.join(choices)}{also}")


#: What Hydra writes into a job's folder before the job itself runs.
_HYDRA_OWN = (".hydra",)


#: What to set for a value a config group leaves open (``???``), by its key.
UNSET_HINTS = {"model.name": "model=litellm takes any litellm model string: set model.name=PROVIDER/MODEL "
                             "(e.g. model.name=anthropic/claude-opus-4-5)"}


def unset_value(exc: Exception) -> str:
    """OmegaConf's error in one line a user can act on: a value left unset (``???``) says what to set, not
    "MissingMandatoryValue while resolving interpolation: Missing mandatory value: model.name"."""
    m = re.search(r"Missing mandatory value: ?([\w.]+)", str(exc))
    if not m:
        return str(exc).splitlines()[0]
    key = m.group(1)
    return f"{key} is not set: {UNSET_HINTS.get(key, f'set {key}=VALUE')}"


def discard_run_dir(output_dir: str | Path, stop: str | Path) -> None:
    """Remove the folder Hydra made for a job refused before it ran (``outputs/DATE/TIME/`` holding only
    Hydra's ``.hydra/`` and the job's log), and the folders above it that it leaves empty, below ``stop`` (the
    directory the command was started in)."""
    out, stop = Path(output_dir).resolve(), Path(stop).resolve()
    if not out.is_dir() or any(p.name not in _HYDRA_OWN and p.suffix != ".log" for p in out.iterdir()):
        return  # the job wrote something of its own: not ours to delete
    shutil.rmtree(out, ignore_errors=True)
    for parent in out.parents:
        if parent == stop or stop not in parent.parents:
            break
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break


def compose(config_name: str, overrides: list[str]):
    """The composed config, as the Hydra entry point would see it (for tests and scripts)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    register_model_strings(overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name, overrides=overrides)

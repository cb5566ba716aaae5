"""kforge: LLM agents that write and optimise compute kernels, verified honestly.

Heavy optional imports (litellm, mlflow) are never made here: the verifier's worker processes import
this package and must start fast without them.
"""

import os
from pathlib import Path

# litellm otherwise fetches a price list over the network when it is imported.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
#: Where ``conf/`` (Hydra) and ``prompts/`` are: the repository root in a checkout (editable install,
#: PYTHONPATH), the package itself in an installed wheel, which carries them as package data.
DATA_DIR = PACKAGE_DIR if (PACKAGE_DIR / "conf").is_dir() else PACKAGE_DIR.parent
#: The same directory under its older name (modules that locate prompts/ through it keep working).
REPO_DIR = DATA_DIR


def cache_dir() -> Path:
    """Where builds, LLM replies and device ceilings are cached (``KFORGE_CACHE_DIR`` overrides)."""
    root = os.environ.get("KFORGE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kforge")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path

"""The environment a worker process starts with: this one's, less anything that looks like a credential."""

from __future__ import annotations

import os
import re

from .. import PACKAGE_DIR

# Variables whose names look like credentials never reach candidate code.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|CERT", re.I)
_SECRET_PREFIX = ("AWS_", "AZURE_", "GOOGLE_", "GCP_", "OPENAI", "ANTHROPIC", "GEMINI", "MISTRAL", "COHERE",
                  "GROQ", "TOGETHER", "DEEPSEEK", "HF_", "HUGGING", "MLFLOW_", "LITELLM", "DATABRICKS", "SSH_",
                  "GITHUB", "GH_", "GIT_", "DATABASE", "PG", "MYSQL", "REDIS")


def is_secret(name: str) -> bool:
    """Whether a variable's name looks like a credential's (such never reach candidate code)."""
    return bool(_SECRET_NAME.search(name)) or name.upper().startswith(_SECRET_PREFIX)


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not is_secret(k)}
    # The package must be importable by `python -m kforge.sandbox.zygote` even when not installed.
    pkg_parent = str(PACKAGE_DIR.parent)
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env

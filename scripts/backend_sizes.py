"""How big each backend is, in lines: its adapter, the hooks it needs in the recorder, its one-shot example
and its conf entry. docs/backends.md's table is this script's output (tests/test_backend_sizes.py keeps it so).

    python scripts/backend_sizes.py            # the Markdown table
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Recorder hooks a backend needs beyond the shared ones (the file, and which backends share it).
HOOKS = {"opencl": ["kforge/sandbox/opencl_hooks.py"], "cute": ["kforge/sandbox/dsl_hooks.py"],
         "tilelang": ["kforge/sandbox/dsl_hooks.py"]}


def lines(path: Path) -> int:
    """Non-blank lines."""
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def sizes() -> list[dict]:
    sys.path.insert(0, str(ROOT))
    from kforge.backends import BACKENDS
    rows = []
    for name in BACKENDS:
        hooks = HOOKS.get(name, [])
        rows.append({"backend": name, "adapter": lines(ROOT / "kforge" / "backends" / f"{name}.py"),
                     "hooks": sum(lines(ROOT / h) for h in hooks), "hooks_file": ", ".join(Path(h).name for h in hooks),
                     "example": lines(ROOT / "prompts" / "examples" / name / "model_new.py"),
                     "conf": lines(ROOT / "conf" / "backend" / f"{name}.yaml")})
    return rows


def table() -> str:
    head = ("| backend | adapter (`kforge/backends/NAME.py`) | recorder hooks of its own | one-shot example "
            "(`model_new.py`) | conf |\n| --- | --- | --- | --- | --- |")
    body = [f"| `{r['backend']}` | {r['adapter']} | {r['hooks']} ({r['hooks_file']})" if r["hooks"] else
            f"| `{r['backend']}` | {r['adapter']} | 0" for r in sizes()]
    rows = [f"{b} | {r['example']} | {r['conf']} |" for b, r in zip(body, sizes())]
    return "\n".join([head, *rows])


if __name__ == "__main__":
    print(table())

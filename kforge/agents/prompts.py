"""Jinja2 prompt templates (``prompts/*.j2``), rendered with StrictUndefined: a missing variable is an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import DATA_DIR

PROMPTS_DIR = DATA_DIR / "prompts"


class Prompts:
    """Renders the templates of one prompts directory (a copy can be edited and passed in)."""

    def __init__(self, directory: str | Path | None = None):
        import jinja2
        self.directory = Path(directory or PROMPTS_DIR)
        if not self.directory.is_dir():
            raise FileNotFoundError(f"prompt templates not found in {self.directory}")
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(self.directory)),
                                      undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                      trim_blocks=True, lstrip_blocks=True, autoescape=False)

    def render(self, name: str, **context: Any) -> str:
        return self.env.get_template(f"{name}.j2").render(**context)

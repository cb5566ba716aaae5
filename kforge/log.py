"""kforge's messages (notices, warnings) go through `logging`, under the ``kforge`` logger.

Modules log to ``logging.getLogger(__name__)`` (``kforge.cli.eval``, ``kforge.apps.reproduce``, ...), so a
host program decides where they go and how loud they are (``logging.getLogger("kforge").setLevel``).
Under Hydra (``kforge-synthesize``) they reach Hydra's handlers: the console and the job's log file.
The plain command-line tools (``kforge``, ``kforge-reproduce``) call `setup`, which prints them on
stderr as bare lines, as they were printed before.
Not messages: the progress bar and a command's results (verdicts, tables, summaries), which stay on
stdout.
"""

from __future__ import annotations

import logging
import sys


class _StderrHandler(logging.StreamHandler):
    """Writes to the current ``sys.stderr``, looked up per message (tests and callers redirect it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def setup(level: int = logging.INFO) -> None:
    """For a command-line entry point, which owns its process: print kforge's messages of ``level`` and
    above on stderr as bare lines (once, however often it is called). They still propagate, so a root
    handler (pytest's, a host program's) sees them too."""
    logger = logging.getLogger("kforge")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.setLevel(level)
        logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)


__all__ = ["setup"]

"""The ``kforge`` command: list problems, verify a candidate, evaluate many, build ahead, speed up a whole model.

One module per subcommand (`problems`, `verify`, `eval`, `build`, `ui`, `workload`), each adding its parser and
the function it runs; `common` holds what they share. The experiment pipeline (LLM agents, sweeps, MLflow)
runs through Hydra: ``kforge-synthesize``.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..errors import ConfigError
from ..log import setup as setup_logging
from ..problems import ProblemError
from . import build, problems, ui, verify, workload
from . import eval as eval_command
from .common import UsageError

__all__ = ["UsageError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kforge", description="kforge: LLM agents write compute kernels; kforge verifies and times them.",
        epilog="The agent pipeline runs through Hydra: kforge-synthesize --help")
    parser.add_argument("--version", action="version", version=f"kforge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (problems, verify, eval_command, build, ui, workload):
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, ProblemError, ConfigError) as exc:  # ConfigError: a store that is none (`store_problem`)
        print(f"kforge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # what finished is kept (eval's rows, a verify's nothing): the same command again goes on from there
        print("kforge: interrupted" + ("; finished rows are kept in the --out file, and the same command again goes "
                                       "on from there" if getattr(args.func, "__name__", "") == "cmd_eval" else ""),
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # `kforge problems | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 0


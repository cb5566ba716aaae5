"""Problems: KernelBench-format reference programs (see docs/problems.md)."""

from .problem import SIZES, Problem, ProblemError, default_size, load_problem_file, problem_from_source
from .suite import (
                    BUILTIN_DIR,
                    PRECISIONS,
                    builtin_solution_path,
                    kernelbench_root,
                    load_builtin,
                    load_directory,
                    parse_ids,
                    resolve_problem,
)

__all__ = ["SIZES", "Problem", "ProblemError", "default_size", "load_problem_file", "problem_from_source", "BUILTIN_DIR",
           "PRECISIONS", "builtin_solution_path", "kernelbench_root", "load_builtin", "load_directory", "parse_ids",
           "resolve_problem"]

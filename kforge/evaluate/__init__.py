"""``kforge eval``: verify many candidate files (KernelBench's generations, or a manifest) in one pool.

`runner` finds the files, verifies them and writes one results row each (`rows`: the rows file, resumed);
`summary` reads rows back into per-level statistics (correct %, fast_p, geomean speedup) and renders them.
"""

from .rows import load_results
from .runner import (
                     CandidateFile,
                     EvalInputError,
                     EvalResult,
                     discover,
                     make_row,
                     parse_generation_name,
                     read_candidate,
                     read_manifest,
                     run_eval,
)
from .summary import ERROR_STATE, render_markdown, render_text, summarise, write_summary

__all__ = ["ERROR_STATE", "CandidateFile", "EvalInputError", "EvalResult", "discover", "load_results", "make_row",
           "parse_generation_name", "read_candidate", "read_manifest", "render_markdown", "render_text",
           "run_eval", "summarise", "write_summary"]

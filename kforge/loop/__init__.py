"""The refinement loop: what runs one problem, iteration by iteration, and tells its observers.

`records` holds what a loop records and tells (`IterationRecord`, `ProblemResult`, `LoopState`, the
`LoopObserver` protocol); `chain` is the iterative chain (``loop=single_shot``, ``loop=iterative``) and
`run_problems`, which runs many problems concurrently; `beam` is beam search (``loop=beam``), a loop of
the same interface.
"""

from .beam import BeamSearch
from .chain import MODES, Advisor, GenericAdvisor, Interrupted, LoopConfig, ProblemLoop, run_problems
from .records import IterationRecord, LoopObserver, LoopState, ProblemResult, Step, make_record, rank_speedup

__all__ = ["MODES", "Advisor", "BeamSearch", "GenericAdvisor", "Interrupted", "IterationRecord", "LoopConfig",
           "LoopObserver", "LoopState", "ProblemLoop", "ProblemResult", "Step", "make_record", "rank_speedup",
           "run_problems"]

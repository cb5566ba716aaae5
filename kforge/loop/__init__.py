"""The refinement loop: what runs one problem, iteration by iteration, and tells its observers.

`records` holds what a loop records and tells (`IterationRecord`, `ProblemResult`, `LoopState`, the
`LoopObserver` protocol with the job's events); `runner` runs a problem (`ProblemLoop`) with a
`SearchStrategy` — `chain.ChainSearch` (``loop=single_shot``, ``loop=iterative``) or `beam.BeamSearch`
(``loop=beam``) — and a job's problems (`run_problems`); a strategy only chooses each iteration, and `step`
writes, verifies and records it; `strategy` says what a strategy may use of the runner, and what the loop
uses of a verifier (`LoopVerifier`); `advice` is what an optimisation pass asks (`Advisor`); `config` is
``conf/loop`` (`LoopConfig`).
"""

from .advice import Advisor, GenericAdvisor
from .beam import BeamSearch
from .chain import ChainSearch
from .config import MODES, LoopConfig
from .records import (
                      IterationRecord,
                      JobEnd,
                      JobStart,
                      LoopObserver,
                      LoopState,
                      ProblemResult,
                      Step,
                      job_stats,
                      make_record,
                      rank_speedup,
)
from .runner import Interrupted, ProblemLoop, run_problems, strategy_for
from .step import Draft
from .strategy import LoopVerifier, Runner, SearchStrategy

__all__ = ["MODES", "Advisor", "BeamSearch", "ChainSearch", "Draft", "GenericAdvisor", "Interrupted", "IterationRecord",
           "JobEnd", "JobStart", "LoopConfig", "LoopObserver", "LoopState", "LoopVerifier", "ProblemLoop",
           "ProblemResult", "Runner", "SearchStrategy", "Step", "job_stats", "make_record", "rank_speedup",
           "run_problems", "strategy_for"]

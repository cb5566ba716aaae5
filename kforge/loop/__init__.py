"""The refinement loop: what runs one problem, iteration by iteration, and tells its observers.

`records` holds what a loop records and tells (`IterationRecord`, `ProblemResult`, `LoopState`, the
`LoopObserver` protocol with the job's events); `runner` runs a problem (`ProblemLoop`) with a
`SearchStrategy` — `chain.ChainSearch` (``loop=single_shot``, ``loop=iterative``) or `beam.BeamSearch`
(``loop=beam``) — and a job's problems (`run_problems`); `advice` is what an optimisation pass asks
(`Advisor`); `config` is ``conf/loop`` (`LoopConfig`).
"""

from .advice import Advisor, GenericAdvisor
from .beam import BeamSearch
from .chain import ChainSearch
from .config import MODES, LoopConfig
from .records import (IterationRecord, JobEnd, JobStart, LoopObserver, LoopState, ProblemResult, Step, job_stats,
                      make_record, rank_speedup)
from .runner import Interrupted, ProblemLoop, run_problems, strategy_for
from .strategy import Runner, SearchStrategy

__all__ = ["MODES", "Advisor", "BeamSearch", "ChainSearch", "GenericAdvisor", "Interrupted", "IterationRecord",
           "JobEnd", "JobStart", "LoopConfig", "LoopObserver", "LoopState", "ProblemLoop", "ProblemResult",
           "Runner", "SearchStrategy", "Step", "job_stats", "make_record", "rank_speedup", "run_problems", "strategy_for"]

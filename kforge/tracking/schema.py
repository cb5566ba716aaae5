"""kforge's MLflow layout: every run kind, tag, metric and artifact path, named here and nowhere else.

The writer (`tracker.Tracker`, driven by `observer.MlflowObserver`) and every reader (`resume`, reference
transfer, the ablation tables, the saved view, ``kforge eval --mlflow``) use these names.

    experiment
      parent run        kind sweep-job: the job's config (params, config.yaml), labels, summary metrics
        problem run     kind problem: a step per iteration (metrics), iter_NNN/ files, best/ files
      eval run          kind eval (``kforge eval --mlflow``): the summary's metrics and files
        candidate run   kind candidate: one evaluated file

**Adding a per-iteration metric** is one edit: a number field on `kforge.loop.IterationRecord`, set
where the loop builds the record. `ITERATION_METRICS` is derived from that dataclass (every int, float
or bool field, less `NOT_ITERATION_METRICS`), so the writer logs it at ``step=iteration`` and readers
can find it by the field's name. A field is logged under its own name unless `ITERATION_METRIC_NAMES`
renames it.
"""

from __future__ import annotations

from dataclasses import fields

from ..loop import IterationRecord
from ..metrics import BASELINES, SPEEDUP_FIELD
from ..verify import STATES

STATE_CODES = {s: i for i, s in enumerate(STATES)}
"""The per-iteration metric ``state_index`` holds a verdict state's index here (MLflow metrics are numbers)."""


class Kind:
    """Values of the tag ``kforge.kind``."""

    JOB = "sweep-job"
    PROBLEM = "problem"
    EVAL = "eval"
    CANDIDATE = "candidate"
    TABLES = "tables"


class Tags:
    KIND = "kforge.kind"
    CONFIG_HASH = "kforge.config_hash"
    """The job's configuration hash (`resume.config_hash`): which runs a rerun continues."""
    SOURCE = "kforge.source"
    """An eval run: the folder or manifest it evaluated."""
    PARENT = "mlflow.parentRunId"
    NOTE = "mlflow.note.content"
    """What MLflow shows as a run's description (Markdown): a job's table of problems."""
    RUN_NAME = "run_name"
    # What a job ran with, on its parent run and each problem run (`kforge.job.pipeline.job_labels`).
    ANALYSIS, MODEL, MODEL_NAME, MODEL_LABEL = "analysis", "model", "model_name", "model_label"
    BACKEND, DEVICE, LOOP_MODE, REFERENCE = "backend", "device", "loop_mode", "reference"
    PROFILER, PROBLEMS_SOURCE = "profiler", "problems_source"
    PASS = "pass"
    """What a verification judges: ``forward`` alone, or a ``training`` step, forward then backward
    (``verify.backward``): the backward ablation's factor."""
    PRECISION = "precision"
    """The precision the workload ran in (``verify.precision``: fp32, tf32, bf16, fp16): the precision ablation's
    factor."""
    DEVICE_NAME, GPU = "device_name", "gpu"
    """The parent run's hardware (``gpu`` on a CUDA backend only)."""
    SPEEDUP_VS = "speedup_vs"
    REFERENCES_AVAILABLE = "references_available"
    # A problem run.
    PROBLEM, LEVEL, SIZE = "problem", "level", "size"
    REFERENCE_AVAILABLE, REFERENCE_SOURCE = "reference_available", "reference_source"
    RULES = "rules"
    """The verifier's rule set (``verify.rules``)."""
    STATE = "state"
    """A problem's outcome (`kforge.loop.ProblemResult.outcome`): ``correct`` once any iteration was, else its
    last state (a candidate's state); ``problem_error`` for a problem skipped because it fails itself."""
    BEST_KERNEL = "best_kernel"
    """The source hash of the best kernel."""
    PROBLEM_FLAGS = "problem_flags"
    """The problem audit's flags, comma-separated."""

    @staticmethod
    def direction_at(iteration: int) -> str:
        """Beam search: the recommendation class of one node's branch (its parent is the metric ``parent``)."""
        return f"direction.{iteration}"

    @staticmethod
    def kernel_at(iteration: int) -> str:
        """The source hash of the kernel one iteration timed (the tables compare timings of one kernel)."""
        return f"kernel.{iteration}"


class Params:
    """MLflow parameters of a job's parent run and its problem runs, beside the parent's flattened config:
    what tells one arm of an ablation from another, so MLflow's compare view and columns group by them."""

    MODEL, BACKEND, LOOP_MODE, REFERENCE = Tags.MODEL, Tags.BACKEND, Tags.LOOP_MODE, Tags.REFERENCE
    PROFILER, ANALYSIS, RULES, LEVEL, PROBLEM = Tags.PROFILER, Tags.ANALYSIS, Tags.RULES, Tags.LEVEL, Tags.PROBLEM
    PASS, PRECISION = Tags.PASS, Tags.PRECISION
    #: On both runs (``level``: a job's levels, comma-separated).
    JOB = (MODEL, BACKEND, LOOP_MODE, REFERENCE, PROFILER, ANALYSIS, RULES, PASS, PRECISION, LEVEL)
    #: On a problem run.
    PROBLEM_RUN = (*JOB, PROBLEM)


#: The tags that tell one configuration from another in the tables.
CONFIG_TAGS = (Tags.MODEL, Tags.BACKEND, Tags.LOOP_MODE, Tags.REFERENCE, Tags.PROFILER, Tags.ANALYSIS, Tags.SIZE,
               Tags.PROBLEMS_SOURCE, Tags.PASS, Tags.PRECISION)
#: A candidate run's tags, copied from its eval row where present (``state`` always).
CANDIDATE_TAGS = ("problem", "level", "problem_id", "sample_id", "backend", "candidate", "candidate_hash")

# -- metrics -----------------------------------------------------------------------------------------
STATE_INDEX = "state_index"
#: IterationRecord fields logged under a name that says against what.
ITERATION_METRIC_NAMES = {SPEEDUP_FIELD[b]: f"speedup_vs_{b}" for b in BASELINES}
#: IterationRecord number fields that are no metric: the step itself, and what only record.json keeps.
NOT_ITERATION_METRICS = ("iteration", "wall_s", "cached_reply", "is_best")


def _is_number(annotation: str) -> bool:
    return set(str(annotation).replace(" ", "").split("|")) <= {"int", "float", "bool", "None"}


def metrics_of(record_type: type = IterationRecord) -> dict[str, str]:
    """Per-iteration metric name -> the record field it holds: every number field but the listed ones."""
    return {ITERATION_METRIC_NAMES.get(f.name, f.name): f.name for f in fields(record_type)
            if _is_number(f.type) and f.name not in NOT_ITERATION_METRICS}


#: The per-iteration metrics besides ``state_index`` (logged first, from the record's ``state``).
ITERATION_METRICS = metrics_of(IterationRecord)


def iteration_values(record: IterationRecord) -> dict[str, float]:
    """One iteration's metrics (those it has a value for)."""
    values = {STATE_INDEX: float(STATE_CODES[record.state])}
    for name, attr in ITERATION_METRICS.items():
        v = getattr(record, attr)
        if v is not None:
            values[name] = float(v)
    return values


def speedup_metric(baseline: str) -> str:
    """The per-iteration speedup over ``baseline``."""
    return ITERATION_METRIC_NAMES[SPEEDUP_FIELD[baseline]]


class Metrics:
    """A problem run's summary (step 0) and a parent run's."""

    CORRECT = "correct"
    CORRECT_KERNELBENCH = "correct_kernelbench"
    """Correct under KernelBench's rules (`kforge.verify.rules`), beside ``correct`` under the job's."""
    SPEED_OF_LIGHT = "speed_of_light"
    BEST_CORRECT = "best_correct"
    BEST_KERNEL_SHARE = "best_kernel_share"
    ITERATIONS = "iterations"
    FIRST_CORRECT_ITERATION = "first_correct_iteration"
    TOTAL_PROMPT_TOKENS, TOTAL_COMPLETION_TOKENS = "total_prompt_tokens", "total_completion_tokens"
    TOTAL_COST_USD = "total_cost_usd"
    # A parent run: `kforge.metrics.summary`'s figures, under these names where they differ.
    PROBLEMS = "problems"
    CORRECTNESS_RATE = "correctness_rate"
    FAST_1 = "fast_1"
    VERIFICATIONS = "verifications"
    PROBLEMS_SKIPPED = "problems_skipped"
    """Problems an earlier job of this configuration finished (not run again)."""
    PROBLEM_ERRORS = "problem_errors"
    """Problems skipped because the problem itself fails (`kforge.problems.ProblemError`)."""
    REPLAYED_CALLS = "replayed_calls"
    """Model calls answered from the cache or by replay: not made, their tokens not counted again."""
    # A problem run: its arm's figures, as the tables count them, over the newest finished problem runs that share
    # its value of the experiment's factor (its group in the ablation view, which shows them as the group's row).
    ARM_PROBLEMS = "arm_problems"
    ARM_CORRECTNESS_RATE = "arm_correctness_rate"
    ARM_FAST_1 = "arm_fast_1"

    @staticmethod
    def arm_geomean_speedup(baseline: str) -> str:
        """The arm's geometric-mean speedup of correct kernels (degenerate problems left out), as in the tables."""
        return f"arm_geomean_{speedup_metric(baseline)}"

    @staticmethod
    def best_speedup(baseline: str) -> str:
        return f"best_{speedup_metric(baseline)}"

    @staticmethod
    def best_speedup_lo(baseline: str) -> str:
        """The lower end of the best speedup's interval (`kforge.verify.retime`: what timing noise leaves)."""
        return f"best_{speedup_metric(baseline)}_lo"

    @staticmethod
    def best_speedup_hi(baseline: str) -> str:
        """The upper end of the best speedup's interval."""
        return f"best_{speedup_metric(baseline)}_hi"

    @staticmethod
    def geomean_speedup(baseline: str) -> str:
        """A parent run's geometric-mean speedup of its correct best kernels."""
        return f"geomean_{speedup_metric(baseline)}"


def level_prefix(level: str) -> str:
    """An eval run's per-level metrics are its summary's figures under this prefix (``level1.fast_1``)."""
    return f"level{level}."


#: `kforge.loop.job_stats` key -> the parent run's metric (the others keep their key).
JOB_METRIC_NAMES = {"n": Metrics.PROBLEMS}
#: A candidate run's metrics: these eval-row keys, ``correct``, and ``state`` (the state's index, under
#: the name kforge used before ``state_index``).
CANDIDATE_METRICS = ("speedup_eager", "speedup_compile", "runtime_ms", "ref_runtime_ms", "compile_ref_runtime_ms",
                     "kernel_share", "wall_s")
CANDIDATE_STATE_INDEX = "state"

#: Metric name -> the name it had before issue 22, for runs logged by an older kforge.
RENAMED = {STATE_INDEX: "state", **{speedup_metric(b): SPEEDUP_FIELD[b] for b in BASELINES},
           **{Metrics.best_speedup(b): f"best_{SPEEDUP_FIELD[b]}" for b in BASELINES}}


def metric(metrics: dict[str, float], name: str) -> float | None:
    """A run's metric by its name, or by its old name in a run logged before the rename."""
    value = metrics.get(name)
    return metrics.get(RENAMED[name]) if value is None and name in RENAMED else value


def metric_history(client, run_id: str, name: str) -> list:
    """``client.get_metric_history`` that also reads a run logged under the metric's old name."""
    history = client.get_metric_history(run_id, name)
    return history or (client.get_metric_history(run_id, RENAMED[name]) if name in RENAMED else [])


# -- artifacts ---------------------------------------------------------------------------------------
class Files:
    CONFIG = "config.yaml"
    """A parent run's composed configuration."""
    BEST_KERNEL = "best/kernel.py"
    BEST_VERDICT = "best/verdict.json"
    ERROR = "error.txt"
    """A problem run that kforge failed on: the traceback."""
    PROBLEM_ERROR = "problem_error.txt"
    """A problem run skipped because the problem itself fails: its traceback."""
    TREE_PLOT = "tree.png"
    """A beam search's problem run: its tree, speedup per node coloured by state (`kforge.tracking.tree_plot.plot_tree`)."""
    # In a problem run's iter_NNN/ (`at`), and a candidate run's root (kernel.py, verdict.json).
    PROMPT, REPLY, KERNEL = "prompt.md", "reply.md", "kernel.py"
    VERDICT, RECORD = "verdict.json", "record.json"
    RECOMMENDATION, ANALYSIS_PROMPT = "recommendation.md", "analysis_prompt.md"
    PROFILE = "profile"
    """A folder: the profiler's files."""

    @staticmethod
    def iteration_dir(iteration: int) -> str:
        """One iteration's folder, numbered as the loop and MLflow's step number it (from 0)."""
        return f"iter_{iteration:03d}"

    @staticmethod
    def at(iteration: int, name: str) -> str:
        return f"{Files.iteration_dir(iteration)}/{name}"


# -- search filters ----------------------------------------------------------------------------------
def tag_is(tag: str, value: str) -> str:
    """An MLflow search filter: tag ``tag`` equals ``value``."""
    return f"tags.`{tag}` = '{value}'"


def metric_is(name: str, value: float) -> str:
    return f"metrics.`{name}` = {value:g}"


# -- a whole-model job (``workload=``, docs/workload.md) --------------------------------------------
#: The experiment ``experiment=whole_workload`` logs into, and the ``whole_workload`` table reads.
WORKLOAD_EXPERIMENT = "kforge-whole_workload"
#: ``problems_source`` of a whole-model job's runs: its problems are the model's regions.
WORKLOAD_SOURCE = "workload"


class WorkloadTags:
    """Tags of a whole-model job's parent run (its regions are its problem runs, as any job's problems are)."""

    MODEL = "workload"
    """The model file's name (``transformer_block.py``); only a whole-model job's parent run has it."""
    MODEL_PATH = "workload.model"
    """The model file's path."""
    DIR = "workload.dir"
    """The extraction's folder on the machine that ran it (reused by a rerun of the same configuration)."""
    STATE = "workload.state"
    """The assembled model's verdict (``correct``, ``numerical_mismatch``...), ``unchanged`` when no region was
    solved, ``interrupted`` when the job was cut off before assembly, ``assembly_failed``."""
    MESSAGE = "workload.message"
    """Why, in words (the verdict's message)."""
    UNSOLVED = "workload.unsolved"
    """Regions no candidate solved (they keep the model's module), comma-separated."""


class WorkloadMetrics:
    """Metrics of a whole-model job's parent run."""

    COVERAGE = "workload_coverage"
    """The regions' share of the model's operator time."""
    REGIONS = "workload_regions"
    SOLVED = "workload_regions_solved"
    """Regions with a correct kernel."""
    REPLACED_SHARE = "workload_replaced_share"
    """The solved regions' share of the model's time."""
    CORRECT = "workload_correct"
    """1 when the assembled model is correct against the original."""
    SPEEDUP_EAGER = "workload_speedup_vs_eager"
    SPEEDUP_COMPILE = "workload_speedup_vs_compile"
    BOUND = "workload_amdahl_bound"
    """1 / (1 - Σs + Σ s/k) over the solved regions' shares s and their own speedups k."""
    SPEEDUP_LO, SPEEDUP_HI = "workload_speedup_vs_eager_lo", "workload_speedup_vs_eager_hi"
    """The end-to-end speedup's interval (`kforge.verify.retime`)."""
    BOUND_LO, BOUND_HI = "workload_amdahl_bound_lo", "workload_amdahl_bound_hi"
    """Amdahl's bound at the ends of the regions' intervals."""
    MODEL_MS = "workload_model_ms"
    """The model's operator time per forward in the profile."""


class WorkloadFiles:
    """A whole-model job's parent run's files: its extraction folder, under ``workload/``."""

    FOLDER = "workload"
    """The extraction (workload.json, region files, profile.txt/png/json) and, after assembly, kernels/."""
    WORKLOAD_JSON = "workload/workload.json"
    PROFILE_TABLE = "workload/profile.txt"
    PROFILE_PLOT = "workload/profile.png"
    ASSEMBLED = "workload/assembled.py"
    RESULT = "workload/result.json"
    SUMMARY = "workload/summary.txt"

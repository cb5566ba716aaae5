"""One synthesis job: config → model, backend, problems, verifier, loop, MLflow. Called by
``pipelines/synthesize.py`` (Hydra) and by the tests (with a composed config).

It only composes and runs: `compose` builds the objects, `execute` hands earlier work (`tracking.resume`)
to `loop.run_problems` and lets the observers (`tracking.observer.MlflowObserver`, which owns the job's
MLflow runs, and `console.Progress`) record and show the job, then prints the summary."""

from __future__ import annotations

import tempfile
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..agents import GenerationAgent, Prompts
from ..backends import Backend, get_backend
from ..errors import ConfigError  # callers import it from here too
from ..llm import LLM, make_model, replaying
from ..loop import Advisor, Interrupted, JobEnd, LoopObserver, ProblemLoop, ProblemResult, run_problems
from ..problems import Problem, default_size, load_builtin, load_directory
from ..sandbox.protocol import DeviceInfo
from ..signals import sigterm_as_interrupt
from ..tracking.observer import JobRun
from ..tracking.schema import WORKLOAD_SOURCE, Tags
from ..verify import BackendUnavailable, Verifier, WorkerPool
from .config import BackendConfig, JobConfig, ProblemsConfig, TrackingConfig
from .config import plain as _plain
from .console import Progress, closing_line, print_summary
from .reference import ReferenceTransferError, load_references, reference_backend
from .workload import PreparedWorkload, WorkloadStage, prepare_workload

if TYPE_CHECKING:
    from ..tracking import Tracker


@dataclass
class Job:
    """What `run` built for one job."""

    conf: dict[str, Any]
    """The job's configuration as plain data (hashed for resume, logged as MLflow params)."""
    config: JobConfig
    """The same, typed."""
    problems: list[Problem]
    backend: Backend
    agent: GenerationAgent
    verifier: Verifier
    llm: LLM
    pool: WorkerPool
    info: DeviceInfo
    """The device's facts (``device``: its name)."""
    advisor: Advisor | None
    stop: threading.Event
    tags: dict[str, str]
    """Extra tags of the parent run."""
    workload: PreparedWorkload | None = None
    """Whole-workload mode (``workload=``): the model whose extracted regions are the problems."""


@dataclass
class JobResult:
    results: list[ProblemResult]
    stats: dict[str, Any]
    parent_run_id: str | None = None
    interrupted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def split_gpus(gpus: list[int], job_num: int, parallel: int) -> list[int]:
    """The GPUs of one of ``parallel`` jobs running at once on one host (joblib): disjoint while
    ``parallel <= len(gpus)`` — job k takes every parallel-th GPU from position k mod parallel."""
    if parallel <= 1 or not gpus:
        return list(gpus)
    if parallel > len(gpus):
        return [gpus[job_num % len(gpus)]]  # more jobs than GPUs: some must share
    return list(gpus[job_num % parallel::parallel])


def make_backend(bcfg: BackendConfig, pool: WorkerPool) -> Backend:
    device = bcfg.device
    if bcfg.name == "triton" and device is None:
        device = "cuda" if pool.gpus else "cpu"
    try:
        return get_backend(bcfg.name, device=device, **(bcfg.options or {}))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def load_problems(pcfg: ProblemsConfig, device: str) -> list[Problem]:
    size = pcfg.size or default_size(device)
    overrides = pcfg.overrides or None
    source = pcfg.source
    if source == "builtin":
        problems = load_builtin(levels=pcfg.levels, ids=pcfg.ids, names=pcfg.names,
                                size=size, overrides=overrides)
    elif source == "kernelbench":
        if not pcfg.root:
            raise ConfigError("problems=kernelbench needs problems.root=PATH (a KernelBench checkout) or "
                              "KERNELBENCH_DIR in the environment; or use problems=kernelbench_hf")
        problems = load_directory(pcfg.root, levels=pcfg.levels, ids=pcfg.ids,
                                  names=pcfg.names, size=size, overrides=overrides)
    else:  # huggingface (`ProblemsConfig` allows no other source)
        from ..problems.huggingface import load_huggingface
        problems = load_huggingface(pcfg.dataset or "ScalingIntelligence/KernelBench",
                                    levels=pcfg.levels, ids=pcfg.ids, size=size, overrides=overrides)
    if pcfg.names and source == "huggingface":
        wanted = set(pcfg.names)
        problems = [p for p in problems if p.key in wanted or p.name in wanted]
    if pcfg.limit:
        problems = problems[: int(pcfg.limit)]
    return problems


def resolve_profiler(kind: str, backend: Backend) -> str:
    """``auto``: ncu for GPU backends where Nsight Compute is installed, else torch.profiler."""
    if kind != "auto":
        return kind
    from ..profile.ncu import find_ncu
    return "ncu" if backend.device == "cuda" and find_ncu() else "torch"


def check_fits(job: JobConfig, backend: Backend, llm: LLM) -> None:
    """What the configuration asks that this backend or model cannot do, said before any worker starts
    (each value on its own was checked when the configuration was read)."""
    pkind = resolve_profiler(job.profiler.kind, backend)
    if pkind in ("ncu", "nsys") and backend.device != "cuda":
        raise ConfigError(f"profiler={pkind} profiles NVIDIA GPU kernels; with backend={backend.name} on "
                          f"{backend.device} use profiler=torch")
    if job.verify.backward:
        try:
            backend.example_dir(job.verify.precision, backward=True)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    acfg = job.analysis
    analyst = acfg.model or llm.config
    if acfg.kind == "llm" and acfg.visual and not analyst.multimodal:
        raise ConfigError(f"analysis.visual=true sends the digest as an image, but model {analyst.name} is not "
                          "marked multimodal (set the analysis model's multimodal: true)")


def make_advisor(job: JobConfig, llm: LLM, backend: Backend, pool: WorkerPool, prompts: Prompts,
                 device_name: str, scratch: str, kind: str, scope: str = ""):
    """What optimisation passes ask for a recommendation: profiler x analysis from the config (``scope``:
    the job's configuration hash, under which a separate analysis model's calls are replayed)."""
    from ..agents import AnalysisAgent, ProfilingAdvisor
    from ..profile import Profiler
    pcfg, acfg = job.profiler, job.analysis
    pkind = resolve_profiler(pcfg.kind, backend)
    if pkind == "none" and acfg.kind == "off":
        return None  # the loop's generic recommendation
    profiler = None if pkind == "none" else Profiler(pkind, pool, scratch, iterations=pcfg.iterations,
                                                     timeout_s=pcfg.timeout_s, metrics=pcfg.metrics)
    agent = None
    if acfg.kind == "llm":
        analysis_llm = replaying(make_model(acfg.model), scope) if acfg.model else llm
        analysis_llm.check()
        agent = AnalysisAgent(analysis_llm, backend, prompts, device_name, visual=acfg.visual,
                              raw_metrics=acfg.raw_metrics, backward=job.verify.backward)
    # The profiler runs the kernel under the job's verify settings (its tolerances, sizes, timeouts).
    return ProfilingAdvisor(backend, profiler, acfg.kind, scratch, agent=agent,
                            ceilings=pool.ceilings(kind, backend.spec()), verify=job.verify.to_dict())


def device_phrase(info: DeviceInfo, backend: Backend) -> str:
    name = info.device if not info.error else backend.device
    return f"a {name}" if backend.device == "cpu" else f"an {name} GPU"


def run(cfg: Any, *, llm: LLM | None = None, tags: dict[str, str] | None = None,
        pool: WorkerPool | None = None) -> JobResult:
    """Run one job. ``llm`` replaces the configured model (tests pass a scripted one they inspect)."""
    conf = _plain(cfg)
    if llm is not None:  # record the model actually used, not the config's default
        conf["model"] = {k: v for k, v in asdict(llm.config).items() if k != "replies"}
    job = JobConfig.from_hydra(conf)  # strict: a misspelt key stops here, naming the valid ones
    llm = llm or make_model(job.model)
    llm.check()  # a missing API key stops here, before any problem starts
    from ..tracking.resume import config_hash
    chash = config_hash(conf)
    llm = replaying(llm, chash)  # a rerun of this configuration replays its calls
    # MLflow's import and a new store's schema take seconds: they run while the workers start
    opening = _Opening(job.tracking)
    own_pool = pool is None
    pool = pool or WorkerPool(gpus=job.workers.gpus, build_workers=job.workers.build, spare=job.workers.spare,
                              light=not needs_compiler_stack(job.verify.compile_ref, job.backend.name))
    try:
        with sigterm_as_interrupt(), tempfile.TemporaryDirectory(prefix="kforge-analysis-") as scratch:
            return execute(compose(conf, job, llm, pool, scratch, chash, tags or {}), opening.tracker())
    finally:
        if own_pool:
            pool.close()
        opening.join()  # a job that stopped early leaves no store half made


def needs_compiler_stack(compile_ref: bool, backend: str) -> bool:
    """Whether a job's run workers should import dynamo, inductor and Triton before forking: when it times
    torch.compile of the reference, or its candidates are Triton. Otherwise each worker starts ~5 s of CPU
    sooner (the sandbox's light preload) and the rare child that needs the stack imports it itself."""
    return bool(compile_ref) or backend == "triton"


class _Opening:
    """The job's `Tracker`, opened on a thread of its own. Safe because this process never forks (workers are
    programs of their own, started with `subprocess`); `tracker()` returns it or raises what opening it raised."""

    def __init__(self, tcfg: TrackingConfig):
        self._tcfg = tcfg
        self._result: Tracker | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._open, name="kforge-open-tracker", daemon=True)
        self._thread.start()

    def _open(self) -> None:
        from ..tracking import Tracker
        try:
            self._result = Tracker(self._tcfg.uri, self._tcfg.experiment or "kforge", self._tcfg.artifact_root)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def tracker(self) -> Tracker:
        self.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def compose(conf: dict[str, Any], job: JobConfig, llm: LLM, pool: WorkerPool, scratch: str, chash: str,
            tags: dict[str, str]) -> Job:
    """The job's objects from its configuration: backend, problems, verifier, started workers, agents."""
    backend = make_backend(job.backend, pool)
    check_fits(job, backend, llm)
    # Whole-workload mode: the problems are a model's regions, put back and verified whole after the loop.
    work = prepare_workload(job, backend, pool, tags, chash) if job.workload.model else None
    problems = work.problems if work else load_problems(job.problems, backend.device)
    verifier = Verifier(job.verify, pool=pool)
    try:
        kinds = verifier.device_kinds(backend)
    except BackendUnavailable:
        raise ConfigError(f"backend={backend.name} runs on a CUDA GPU and none is visible here: use backend=cpu, "
                          "or backend=triton backend.device=cpu for Triton's interpreter (correctness only)") from None
    pool.start(["build", *kinds])  # all workers at once, not one by one as the first loops need them
    info = pool.device_info(kinds[0], backend.spec())
    prompts = Prompts(job.prompts_dir)
    agent = GenerationAgent(llm, backend, prompts, device_phrase(info, backend), precision=job.verify.precision,
                            backward=job.verify.backward)
    advisor = make_advisor(job, llm, backend, pool, prompts, device_phrase(info, backend), scratch, kinds[0], chash)
    return Job(conf, job, problems, backend, agent, verifier, llm, pool, info, advisor, threading.Event(),
               {**tags, **(work.tags if work else {})}, work)


class _CloseOnAbort(LoopObserver):
    """A second Ctrl-C closes the worker pool, so verifications in flight end at once."""

    def __init__(self, pool: WorkerPool):
        self.pool = pool

    def job_aborting(self) -> None:
        self.pool.close()


def execute(job: Job, tracker: Tracker) -> JobResult:
    """Take over what earlier jobs of this configuration left in ``tracker``, run the
    rest with MLflow and the progress lines observing, and summarise."""
    from ..tracking.observer import MlflowObserver
    from ..tracking.resume import take_over
    cfg, loop_cfg, tcfg = job.config, job.config.loop, job.config.tracking
    if tcfg.autolog_llm:
        import mlflow
        mlflow.set_tracking_uri(tracker.uri)
        mlflow.set_experiment(tracker.experiment)
        mlflow.litellm.autolog()
    labels = job_labels(job)
    try:
        references = load_references(cfg.reference, job.problems, job.backend.name, tracker.uri,
                                     precision=job.config.verify.precision, backward=cfg.verify.backward)
    except ReferenceTransferError as exc:
        raise ConfigError(str(exc)) from None
    earlier = take_over(tracker, labels[Tags.CONFIG_HASH], job.problems, cfg.resume)
    done, cut = earlier.done, earlier.cut
    todo = [p for p in job.problems if p.key not in done]
    tracking = MlflowObserver(tracker, _job_run(job, labels, references, earlier),
                              continued={k: prev.run_id for k, prev in cut.items()})
    _announce(job, tracker, labels, earlier, todo, references)
    progress = Progress(len(todo), loop_cfg.budget, run_of=tracking.run_ids.get)
    observers: list[LoopObserver] = [tracking, progress, _CloseOnAbort(job.pool)]
    # Whole-workload mode: once the regions are solved, the model is put back together and verified whole, and
    # the outcome told to the others before the job's end closes its parent run.
    stage = WorkloadStage(job.workload, job, then=observers) if job.workload is not None else None
    loop = ProblemLoop(job.agent, job.verifier, loop_cfg, advisor=job.advisor,
                       observers=[stage, *observers] if stage else observers, stop=job.stop)
    try:
        end = run_problems(todo, loop, concurrency=loop_cfg.concurrency, references=references,
                           resumes={k: prev.state for k, prev in cut.items()},
                           done=[done[p.key].result for p in job.problems if p.key in done])
    except Interrupted as exc:
        end = exc.end
    finally:
        progress.close()
    _report(end, tracker, tracking.parent_id or earlier.parent, todo, job.llm.config.kind)
    extra: dict[str, Any] = {"verifier_time_s": dict(job.verifier.time_s)}
    if stage is not None:
        extra["workload"] = stage.record
    if end.why:
        extra["stopped"] = end.why
    return JobResult(end.results, end.stats, tracking.parent_id or earlier.parent, end.interrupted, extra=extra)


def job_run_name(job: Job) -> str:
    """``oracle · cpu · iterative · L1``: the arm and the levels, so two arms' jobs are told apart; a precision other
    than fp32 is named too (``oracle · cpu · bf16 · iterative · L1``)."""
    levels = sorted({p.level for p in job.problems if p.level is not None})
    precision = job.config.verify.precision
    return " · ".join([job.llm.config.name, job.backend.name, *([precision] if precision != "fp32" else []),
                       job.config.loop.mode, "+".join(f"L{lv}" for lv in levels) or "no level"])


def _job_run(job: Job, labels: dict[str, str], references: dict[str, Any], previous: Any) -> JobRun:
    """The parent run's description; ``previous`` (`Earlier`) names the earlier job's parent it continues."""
    from omegaconf import OmegaConf
    extra = {**job.tags, Tags.DEVICE_NAME: job.info.device}
    if job.backend.device == "cuda":
        extra[Tags.GPU] = job.info.device
    if labels[Tags.REFERENCE] != "none":
        have = sum(r is not None for r in references.values())
        extra[Tags.REFERENCES_AVAILABLE] = f"{have}/{len(job.problems)}"
    return JobRun(job_run_name(job), job.conf, OmegaConf.to_yaml(OmegaConf.create(job.conf)), labels, extra,
                  job.config.loop.speedup_vs, previous.parent, previous.parent_open)


def _announce(job: Job, tracker: Any, labels: dict[str, str], earlier: Any, todo: list[Problem],
              references: dict[str, Any]) -> None:
    """The lines a job starts with: what earlier jobs left, references, what runs where, a slow first build."""
    from .firstrun import PCH_NOTICE, pch_pending
    loop_cfg, n = job.config.loop, len(job.problems)
    if earlier.stale:
        print(f"kforge: {earlier.stale} run(s) of this configuration were left RUNNING by a job that was killed; "
              "marked KILLED", flush=True)
    if not todo and earlier.done:
        closed = "; its parent run, left open by an interrupted job, is closed FINISHED with their figures" \
            if earlier.parent_open else ""
        print(f"kforge: this job is complete: its {len(earlier.done)} problem(s) finished earlier (parent run "
              f"{earlier.parent}); nothing to run, no run added{closed}", flush=True)
    elif earlier.problems:
        cut = earlier.cut
        print(f"kforge: resuming (parent run {earlier.parent}): {len(earlier.done)} problem(s) finished earlier "
              "are skipped" + (f", {len(cut)} cut off earlier continue from their last iteration" if cut else ""),
              flush=True)
    ref_kind = labels[Tags.REFERENCE]
    if ref_kind != "none":
        have = sum(r is not None for r in references.values())
        print(f"kforge: reference transfer ({ref_kind}): {have} of {n} problem(s) have a reference; "
              "the others run without one", flush=True)
    unit = "model call" if loop_cfg.mode == "beam" else "iteration"
    precision = labels.get(Tags.PRECISION, "fp32")
    print(f"kforge: {n} problem(s) · model {labels[Tags.MODEL_LABEL]} · backend {job.backend.describe()} · "
          + (f"{precision} (inputs and weights cast; speedups over eager at {precision}) · " if precision != "fp32"
             else "") +
          f"{loop_cfg.mode} ({loop_cfg.budget} {unit}(s)) · MLflow {tracker.uri} (experiment {tracker.experiment})",
          flush=True)
    if todo and pch_pending(job.backend, job.pool.build_cache):
        print(f"kforge: {PCH_NOTICE}", flush=True)


def _report(end: JobEnd, tracker: Any, parent: str | None, todo: list[Problem], model_kind: str) -> None:
    """The lines a job ends with."""
    if end.interrupted:
        cut_off = [r for r in end.ended if r.stopped]
        left = len(todo) - len(end.ended) + len(cut_off)
        print(f"\nkforge: {'stopped: ' + end.why if end.why else 'interrupted'}; {len(end.results)} finished problem(s) "
              f"are in MLflow (parent run {parent}, KILLED); {left} problem(s) of this job are cut off or not started "
              "(and a Hydra multirun's later jobs too): run the same command again to continue them.")
    for r in end.skipped:
        print(f"kforge: {r.problem.key} was skipped: the problem itself fails ("
              f"{r.problem_error.strip().splitlines()[-1]}); its traceback is in MLflow")
    print_summary(end.results, end.stats, cut_off=[r for r in end.ended if r.stopped], model_kind=model_kind,
                  skipped=end.skipped)
    print(closing_line(tracker))


def job_labels(job: Job) -> dict[str, str]:
    """What the job ran with: tags of its parent run and of every problem run (`schema.Params` of them are
    parameters too)."""
    from ..tracking.resume import config_hash
    cfg, llm, backend = job.config, job.llm, job.backend
    ref_kind = cfg.reference.kind
    if ref_kind != "none":
        ref_kind = f"{ref_kind}:{reference_backend(cfg.reference.backend, backend.name)}"
    # ``model`` is what answered: the litellm model string (not the config's short name) for a real model.
    model = (llm.config.model or llm.config.name) if llm.config.kind == "litellm" else llm.config.name
    levels = sorted({str(p.level) for p in job.problems if p.level is not None})
    return {Tags.ANALYSIS: cfg.analysis.kind, Tags.MODEL: model,
            Tags.MODEL_NAME: llm.config.name, Tags.MODEL_LABEL: llm.config.label, Tags.BACKEND: backend.name,
            Tags.DEVICE: backend.device, Tags.LOOP_MODE: cfg.loop.mode, Tags.REFERENCE: ref_kind,
            Tags.PROFILER: resolve_profiler(cfg.profiler.kind, backend),
            Tags.PROBLEMS_SOURCE: WORKLOAD_SOURCE if job.workload is not None else cfg.problems.source,
            Tags.RULES: cfg.verify.rules, Tags.PASS: "training" if cfg.verify.backward else "forward",
            Tags.PRECISION: cfg.verify.precision,
            Tags.LEVEL: ",".join(levels), Tags.CONFIG_HASH: config_hash(job.conf)}

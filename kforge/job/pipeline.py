"""One synthesis job: config → model, backend, problems, verifier, loop, MLflow. Called by
``pipelines/synthesize.py`` (Hydra) and by the tests (with a composed config).

It only composes: it builds the objects, hands earlier work (`tracking.resume`) to `run_problems`,
lets the loop's observers (`tracking.observer.MlflowObserver`, `console.Progress`) record and show
each problem, and summarises."""

from __future__ import annotations

import signal
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from ..agents import GenerationAgent, Prompts
from ..backends import Backend, get_backend
from .config import BackendConfig, JobConfig, ProblemsConfig
from .config import plain as _plain
from .console import Progress, print_summary
from ..errors import ConfigError  # callers import it from here too
from ..llm import LLM, make_model, replaying
from ..loop import Advisor, Interrupted, ProblemLoop, ProblemResult, run_problems
from ..problems import Problem, load_builtin, load_directory
from .reference import ReferenceTransferError, load_references, reference_backend
from .workload import finish_workload, prepare_workload
from ..loop import BeamSearch
from ..tracking.schema import Metrics, Tags
from ..verify import BackendUnavailable, Verifier, WorkerPool


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
    info: dict[str, Any]
    """The device's facts (``device``: its name)."""
    advisor: Advisor | None
    stop: threading.Event
    tags: dict[str, str]
    """Extra tags of the parent run."""


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
    size = pcfg.size or ("cpu" if device == "cpu" else "gpu")
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
    elif source == "huggingface":
        from ..problems.huggingface import load_huggingface
        problems = load_huggingface(pcfg.dataset or "ScalingIntelligence/KernelBench",
                                    levels=pcfg.levels, ids=pcfg.ids, size=size, overrides=overrides)
    else:
        raise ConfigError(f"problems.source must be builtin, kernelbench or huggingface, not {source!r}")
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


def make_advisor(job: JobConfig, llm: LLM, backend: Backend, pool: WorkerPool, prompts: Prompts,
                 device_name: str, scratch: str, kind: str, scope: str = ""):
    """What optimisation passes ask for a recommendation: profiler x analysis from the config (``scope``:
    the job's configuration hash, under which a separate analysis model's calls are replayed)."""
    from ..agents import AnalysisAgent, ProfilingAdvisor
    from ..profile import PROFILERS, Profiler
    pcfg, acfg = job.profiler, job.analysis
    pkind, akind = pcfg.kind, acfg.kind
    pkind = resolve_profiler(pkind, backend)
    if pkind not in PROFILERS:
        raise ConfigError(f"profiler.kind must be one of {', '.join(PROFILERS)}, not {pkind!r}")
    if pkind in ("ncu", "nsys") and backend.device != "cuda":
        raise ConfigError(f"profiler={pkind} profiles NVIDIA GPU kernels; with backend={backend.name} on "
                          f"{backend.device} use profiler=torch")
    if pkind == "none" and akind == "off":
        return None  # the loop's generic recommendation
    profiler = None if pkind == "none" else Profiler(pkind, pool, scratch, iterations=pcfg.iterations,
                                                     timeout_s=pcfg.timeout_s, metrics=pcfg.metrics)
    agent = None
    if akind == "llm":
        mcfg = acfg.model
        analysis_llm = replaying(make_model(mcfg), scope) if mcfg else llm
        analysis_llm.check()
        try:
            agent = AnalysisAgent(analysis_llm, backend, prompts, device_name, visual=acfg.visual,
                                  raw_metrics=acfg.raw_metrics)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    try:
        return ProfilingAdvisor(backend, profiler, akind, scratch, agent=agent,
                                ceilings=pool.ceilings(kind, backend.spec()))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def device_phrase(info: dict[str, Any], backend: Backend) -> str:
    name = info.get("device", backend.device)
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

    own_pool = pool is None
    workers = job.workers
    pool = pool or WorkerPool(gpus=workers.gpus, build_workers=workers.build, spare=workers.spare)
    stop = threading.Event()
    previous_term = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is threading.main_thread():
        # A scheduler's SIGTERM ends the job like Ctrl-C: finished problems stay finished in MLflow.
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        backend = make_backend(job.backend, pool)
        # Whole-workload mode: the problems are a model's regions, put back and verified whole after the loop.
        work = prepare_workload(job, backend, pool, tags or {}, chash) if job.workload.model else None
        problems = work.problems if work else load_problems(job.problems, backend.device)
        verifier = Verifier(job.verify, pool=pool)
        try:
            kinds = verifier.device_kinds(backend)
        except BackendUnavailable:
            raise ConfigError(f"backend={backend.name} runs on a CUDA GPU and none is visible here: use backend=cpu, "
                              "or backend=triton backend.device=cpu for Triton's interpreter (correctness only)") \
                from None
        pool.start(["build", *kinds])  # all workers at once, not one by one as the first loops need them
        info = pool.device_info(kinds[0], backend.spec())
        prompts = Prompts(job.prompts_dir)
        agent = GenerationAgent(llm, backend, prompts, device_phrase(info, backend))
        with tempfile.TemporaryDirectory(prefix="kforge-analysis-") as scratch:
            advisor = make_advisor(job, llm, backend, pool, prompts, device_phrase(info, backend), scratch, kinds[0],
                                   chash)
            built = Job(conf, job, problems, backend, agent, verifier, llm, pool, info, advisor, stop,
                        {**(tags or {}), **(work.tags if work else {})})
            result = _run_tracked(built)
            if work:
                finish_workload(work, built, result)
            return result
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous_term)
        if own_pool:
            pool.close()


def job_labels(job: Job) -> dict[str, str]:
    """What the job ran with: tags of its parent run and of every problem run."""
    cfg, llm, backend = job.config, job.llm, job.backend
    ref_kind = cfg.reference.kind
    if ref_kind != "none":
        ref_kind = f"{ref_kind}:{reference_backend(cfg.reference.backend, backend.name)}"
    # ``model`` is what answered: the litellm model string (not the config's short name) for a real model.
    model = (llm.config.model or llm.config.name) if llm.config.kind == "litellm" else llm.config.name
    return {Tags.ANALYSIS: cfg.analysis.kind, Tags.MODEL: model,
            Tags.MODEL_NAME: llm.config.name, Tags.MODEL_LABEL: llm.config.label, Tags.BACKEND: backend.name,
            Tags.DEVICE: backend.device, Tags.LOOP_MODE: job.config.loop.mode, Tags.REFERENCE: ref_kind,
            Tags.PROFILER: resolve_profiler(cfg.profiler.kind, backend), Tags.PROBLEMS_SOURCE: cfg.problems.source}


def _run_tracked(job: Job) -> JobResult:
    """Resume what earlier jobs left, run the problems with MLflow and the progress lines observing, summarise."""
    from omegaconf import OmegaConf

    from .firstrun import PCH_NOTICE, pch_pending
    from ..tracking import Tracker
    from ..tracking.observer import MlflowObserver
    from ..tracking.resume import config_hash, take_over
    conf, backend, loop_cfg, pool = job.conf, job.backend, job.config.loop, job.pool
    tcfg = job.config.tracking
    tracker = Tracker(tcfg.uri, tcfg.experiment or "kforge", tcfg.artifact_root)
    if tcfg.autolog_llm:
        import mlflow
        mlflow.set_tracking_uri(tracker.uri)
        mlflow.set_experiment(tracker.experiment)
        mlflow.litellm.autolog()
    labels = job_labels(job)
    try:
        references = load_references(job.config.reference, job.problems, backend.name, tracker.uri)
    except ReferenceTransferError as exc:
        raise ConfigError(str(exc)) from None
    labels[Tags.CONFIG_HASH] = config_hash(conf)
    previous, stale = take_over(tracker, labels[Tags.CONFIG_HASH], job.problems, job.config.resume)
    if stale:
        print(f"kforge: {stale} run(s) of this configuration were left RUNNING by a job that was killed; "
              "marked KILLED", flush=True)
    done = [p for p in job.problems if p.key in previous and previous[p.key].finished]
    todo = [p for p in job.problems if p not in done]
    cut = {k: prev for k, prev in previous.items() if not prev.finished}
    hardware = {Tags.DEVICE_NAME: job.info.get("device", "")}
    if backend.device == "cuda":
        hardware[Tags.GPU] = job.info.get("device", "")
    parent = tracker.start_parent(f"{job.llm.config.name}-{backend.name}-{loop_cfg.mode}", conf,
                                  OmegaConf.to_yaml(OmegaConf.create(conf)), {**labels, **job.tags, **hardware})
    if previous:
        print(f"kforge: resuming: {len(done)} problem(s) finished earlier are skipped"
              + (f", {len(cut)} cut off earlier continue from their last iteration" if cut else ""), flush=True)
    ref_kind = labels[Tags.REFERENCE]
    if ref_kind != "none":
        have = sum(r is not None for r in references.values())
        print(f"kforge: reference transfer ({ref_kind}): {have} of {len(job.problems)} problem(s) have a reference; "
              "the others run without one", flush=True)
        tracker.client.set_tag(parent, Tags.REFERENCES_AVAILABLE, f"{have}/{len(job.problems)}")
    print(f"kforge: {len(job.problems)} problem(s) · model {labels[Tags.MODEL_LABEL]} · backend {backend.describe()} · "
          f"{loop_cfg.mode} ({loop_cfg.budget} {'model call' if loop_cfg.mode == 'beam' else 'iteration'}(s)) · MLflow {tracker.uri} (experiment {tracker.experiment})",
          flush=True)
    if todo and pch_pending(backend, pool.build_cache):
        print(f"kforge: {PCH_NOTICE}", flush=True)

    tracking = MlflowObserver(tracker, parent, labels, continued={k: prev.run_id for k, prev in cut.items()})
    progress = Progress(len(todo), loop_cfg.budget, run_of=tracking.run_ids.get)
    # Beam search has the loop's interface and observers: the sweep, MLflow and resume treat it alike.
    loop_type = BeamSearch if loop_cfg.mode == "beam" else ProblemLoop
    loop = loop_type(job.agent, job.verifier, loop_cfg, advisor=job.advisor, observers=[tracking, progress],
                     stop=job.stop)
    interrupted = False
    runs_before = pool.counters["run"]
    try:
        ended = run_problems(todo, loop, concurrency=loop_cfg.concurrency, references=references,
                             resumes={k: prev.state for k, prev in cut.items()}, on_done=progress.advance,
                             on_stop=progress.stopping, on_abort=pool.close)
    except Interrupted as exc:
        interrupted, ended = True, exc.results
    finally:
        progress.close()
    # Finished problems (earlier ones included) make the job's metrics; cut-off ones wait for a rerun.
    results: list[ProblemResult] = [previous[p.key].result for p in done] + [r for r in ended if not r.stopped]
    cut_off = [r for r in ended if r.stopped]
    tracking.kill_open()
    tracker.client.log_metric(parent, Metrics.VERIFICATIONS, pool.counters["run"] - runs_before)
    tracker.client.log_metric(parent, Metrics.PROBLEMS_SKIPPED, len(done))
    stats = tracker.end_parent(parent, results, status="KILLED" if interrupted else "FINISHED",
                               speedup_vs=loop_cfg.speedup_vs)
    if interrupted:
        left = len(todo) - len(ended) + len(cut_off)
        print(f"\nkforge: interrupted; {len(results)} finished problem(s) are in MLflow (parent run {parent}, "
              f"KILLED); {left} problem(s) are cut off or not started: run the same command again to continue "
              "them.")
    print_summary(results, stats)
    print(f"runs table: {tracker.view_url()}" + ("" if tracker.uri.startswith("http") else "  (after `make ui`)"))
    return JobResult(results, stats, parent, interrupted, extra={"verifier_time_s": dict(job.verifier.time_s)})

"""One synthesis job: config → model, backend, problems, verifier, loop, MLflow. Called by
``pipelines/synthesize.py`` (Hydra) and by the tests (with a composed config)."""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from .agents import GenerationAgent, Prompts
from .backends import Backend, get_backend
from .config import BackendConfig, JobConfig, ProblemsConfig
from .config import plain as _plain
from .errors import ConfigError  # callers import it from here too
from .llm import LLM, make_model, replaying
from .loop import Interrupted, ProblemLoop, ProblemResult, run_problems
from .problems import Problem, load_builtin, load_directory
from .verify import BackendUnavailable, Verifier, WorkerPool


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
        from .problems.huggingface import load_huggingface
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
    from .profile.ncu import find_ncu
    return "ncu" if backend.device == "cuda" and find_ncu() else "torch"


def make_advisor(job: JobConfig, llm: LLM, backend: Backend, pool: WorkerPool, prompts: Prompts,
                 device_name: str, scratch: str, kind: str, scope: str = ""):
    """What optimisation passes ask for a recommendation: profiler x analysis from the config (``scope``:
    the job's configuration hash, under which a separate analysis model's calls are replayed)."""
    from .agents import AnalysisAgent, ProfilingAdvisor
    from .profile import PROFILERS, Profiler
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


def _status_line(problem: Problem, record, n: int) -> str:
    sp = f"{record.speedup_eager:.2f}x eager" if record.speedup_eager else ""
    if record.speedup_compile:
        sp += f", {record.speedup_compile:.2f}x compile"
    best = " *best*" if record.is_best else ""
    # The iteration's index as MLflow's step and iter_NNN/ have it (from 0), then how far the budget is spent.
    return (f"{problem.key:34} iter_{record.iteration:03d} ({record.iteration + 1} of {n}) {record.phase:11} "
            f"{record.state:20} {sp}{best}  ({record.wall_s:.1f} s)")


def print_summary(results: list[ProblemResult], stats: dict[str, Any], out=None) -> None:
    out = out or sys.stdout  # looked up now: a caller may have redirected it
    print("\nproblem                            best state           iters  speedup(eager)  speedup(compile)", file=out)
    for r in results:
        state = "correct" if r.correct else (r.records[-1].state if r.records else ("error" if r.error else "-"))
        fmt = lambda x: f"{x:.2f}x" if x else "-"  # noqa: E731
        print(f"{r.problem.key:34} {state:20} {len(r.records):5}  {fmt(r.speedup_eager):>14}  "
              f"{fmt(r.speedup_compile):>16}", file=out)
    g = stats.get("geomean_speedup")
    print(f"\ncorrect {stats['fast_0']:.0%} · fast_1 {stats['fast_1']:.0%} · fast_1.5 {stats['fast_1.5']:.0%} · "
          f"geomean speedup {g:.2f}x" if g else f"\ncorrect {stats['fast_0']:.0%} · no correct kernels", file=out)
    cost = stats.get("total_cost_usd")
    print(f"tokens {stats['total_prompt_tokens']} in / {stats['total_completion_tokens']} out · "
          + (f"cost ${cost:.4f}" if cost is not None else "cost unknown (litellm has no price for this model)"),
          file=out)


def run(cfg: Any, *, llm: LLM | None = None, tags: dict[str, str] | None = None,
        pool: WorkerPool | None = None) -> JobResult:
    """Run one job. ``llm`` replaces the configured model (tests pass a scripted one they inspect)."""
    from omegaconf import OmegaConf
    conf = _plain(cfg)
    if llm is not None:  # record the model actually used, not the config's default
        conf["model"] = {k: v for k, v in asdict(llm.config).items() if k != "replies"}
    job = JobConfig.from_hydra(conf)  # strict: a misspelt key stops here, naming the valid ones
    llm = llm or make_model(job.model)
    llm.check()  # a missing API key stops here, before any problem starts
    from .resume import config_hash
    chash = config_hash(conf)
    llm = replaying(llm, chash)  # a rerun of this configuration replays its calls
    loop_cfg, verify_cfg = job.loop, job.verify

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
        problems = load_problems(job.problems, backend.device)
        verifier = Verifier(verify_cfg, pool=pool)
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
            return _run_tracked(conf, OmegaConf.to_yaml(OmegaConf.create(conf)), problems, backend, agent, verifier,
                                loop_cfg, llm, stop, tags or {}, pool, info, advisor)
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous_term)
        if own_pool:
            pool.close()


def _run_tracked(conf, conf_yaml, problems, backend, agent, verifier, loop_cfg, llm, stop, tags, pool, info,
                 advisor=None):
    from tqdm import tqdm

    from .firstrun import PCH_NOTICE, pch_pending
    from .tracking import Tracker
    job = JobConfig.from_hydra(conf)  # the typed view of ``conf``, which stays for the hash and MLflow's params
    tcfg = job.tracking
    tracker = Tracker(tcfg.uri, tcfg.experiment or "kforge", tcfg.artifact_root)
    if tcfg.autolog_llm:
        import mlflow
        mlflow.set_tracking_uri(tracker.uri)
        mlflow.set_experiment(tracker.experiment)
        mlflow.litellm.autolog()
    model_label = llm.config.label
    ref_kind = job.reference.kind
    if ref_kind != "none":
        src = job.reference.backend or "auto"
        ref_kind = f"{ref_kind}:{('triton' if backend.name == 'cuda' else 'cuda') if src == 'auto' else src}"
    prof_kind = resolve_profiler(job.profiler.kind, backend)
    analysis_kind = job.analysis.kind
    # ``model`` is what answered: the litellm model string (not the config's short name) for a real model.
    model = (llm.config.model or llm.config.name) if llm.config.kind == "litellm" else llm.config.name
    common = {"analysis": analysis_kind, "model": model, "model_name": llm.config.name, "model_label": model_label,
              "backend": backend.name, "device": backend.device, "loop_mode": loop_cfg.mode, "reference": ref_kind,
              "profiler": prof_kind, "problems_source": job.problems.source}
    from .reference import ReferenceError, load_references
    try:
        references = load_references(job.reference, problems, backend.name, tracker.uri)
    except ReferenceError as exc:
        raise ConfigError(str(exc)) from None
    from .resume import config_hash, previous_runs, stale_runs
    chash = config_hash(conf)
    common["kforge.config_hash"] = chash
    previous = previous_runs(tracker.client, tracker.experiment_id, chash, problems) if job.resume \
        else {}
    continued = {prev.run_id for prev in previous.values()}
    stale = [r for r in stale_runs(tracker.client, tracker.experiment_id, chash) if r.info.run_id not in continued]
    for r in stale:
        tracker.kill(r.info.run_id)
    if stale:
        print(f"kforge: {len(stale)} run(s) of this configuration were left RUNNING by a job that was killed; "
              "marked KILLED", flush=True)
    done = [p for p in problems if p.key in previous and previous[p.key].finished]
    todo = [p for p in problems if p not in done]
    hardware = {"device_name": info.get("device", "")}
    if backend.device == "cuda":
        hardware["gpu"] = info.get("device", "")
    parent = tracker.start_parent(f"{llm.config.name}-{backend.name}-{loop_cfg.mode}", conf, conf_yaml,
                                  {**common, **tags, **hardware})
    if previous:
        cut = [k for k, prev in previous.items() if not prev.finished]
        print(f"kforge: resuming: {len(done)} problem(s) finished earlier are skipped"
              + (f", {len(cut)} cut off earlier continue from their last iteration" if cut else ""), flush=True)
    if ref_kind != "none":
        have = sum(r is not None for r in references.values())
        print(f"kforge: reference transfer ({ref_kind}): {have} of {len(problems)} problem(s) have a reference; "
              "the others run without one", flush=True)
        tracker.client.set_tag(parent, "references_available", f"{have}/{len(problems)}")
    n_iter = 1 if loop_cfg.mode == "single_shot" else loop_cfg.iterations
    print(f"kforge: {len(problems)} problem(s) · model {model_label} · backend {backend.describe()} · "
          f"{loop_cfg.mode} ({n_iter} iteration(s)) · MLflow {tracker.uri} (experiment {tracker.experiment})",
          flush=True)
    if todo and pch_pending(backend, pool.build_cache):
        print(f"kforge: {PCH_NOTICE}", flush=True)
    # The bar only where a person watches; logs (CI, nohup, Hydra multirun) get the lines alone.
    bar = tqdm(total=len(todo), desc="problems", unit="problem", dynamic_ncols=True, file=sys.stdout,
               disable=not sys.stdout.isatty())
    run_ids: dict[str, str] = {}

    def on_iteration(problem, record, attempt, verdict, recommendation):
        tracker.log_iteration(run_ids[problem.key], record, attempt, verdict, recommendation)
        bar.write(_status_line(problem, record, n_iter))

    class TrackedLoop(ProblemLoop):
        def run(self, problem, reference=None, start=0, prior=None, last_code=None, last_verdict=None):
            prev = previous.get(problem.key)
            if prev is not None:  # cut off earlier: continue in the same MLflow run
                rid = prev.run_id
                tracker.reopen(rid)
                start, prior, last_code, last_verdict = prev.start, prev.result, prev.last_code, prev.last_verdict
            else:
                rid = tracker.start_problem(parent, problem.key, {
                    **common, "problem": problem.key, "level": str(problem.level), "size": problem.size,
                    "reference_available": str(reference is not None).lower(),
                    "reference_source": reference.source if reference else "none"})
            run_ids[problem.key] = rid
            try:
                result = super().run(problem, reference, start, prior, last_code, last_verdict)
            except Exception:  # noqa: BLE001 - a bug in kforge: record it where the user will look, go on
                result = prior or ProblemResult(problem)
                if self.stop.is_set():  # the pool closed under a verification (a second Ctrl-C): cut off
                    result.stopped = True
                    tracker.end_problem(rid, result, status="KILLED")
                    return result
                result.error = traceback.format_exc()
                tracker.end_problem(rid, result, status="FAILED")
                last = result.error.strip().splitlines()[-1]
                bar.write(f"{problem.key:<34} kforge failed on this problem ({last}); the traceback is "
                          f"error.txt in MLflow run {rid}, and a rerun continues it")
                return result
            except BaseException:
                tracker.kill(rid)
                raise
            tracker.end_problem(rid, result, status="KILLED" if result.stopped else "FINISHED")
            return result

    def on_stop(in_flight: int) -> None:
        bar.write(f"\nkforge: stopping: no new work; {in_flight} problem(s) in flight end after their current step, "
                  "marked KILLED (Ctrl-C again to stop them now)")

    loop = TrackedLoop(agent, verifier, loop_cfg, advisor=advisor, on_iteration=on_iteration, stop=stop)
    interrupted = False
    runs_before = pool.counters["run"]
    try:
        ended = run_problems(todo, loop, concurrency=loop_cfg.concurrency, references=references,
                             on_done=lambda r: bar.update(1), on_stop=on_stop, on_abort=pool.close)
    except Interrupted as exc:
        interrupted, ended = True, exc.results
    finally:
        bar.close()
    # Finished problems (earlier ones included) make the job's metrics; cut-off ones wait for a rerun.
    results: list[ProblemResult] = [previous[p.key].result for p in done] + [r for r in ended if not r.stopped]
    cut_off = [r for r in ended if r.stopped]
    for key in set(run_ids) - {r.problem.key for r in ended}:
        tracker.kill(run_ids[key])  # still in a model call after a second Ctrl-C
    tracker.client.log_metric(parent, "verifications", pool.counters["run"] - runs_before)
    tracker.client.log_metric(parent, "problems_skipped", len(done))
    stats = tracker.end_parent(parent, results, status="KILLED" if interrupted else "FINISHED",
                               speedup_vs=loop_cfg.speedup_vs)
    if interrupted:
        left = len(todo) - len(ended) + len(cut_off)
        print(f"\nkforge: interrupted; {len(results)} finished problem(s) are in MLflow (parent run {parent}, "
              f"KILLED); {left} problem(s) are cut off or not started: run the same command again to continue "
              "them.")
    print_summary(results, stats)
    print(f"runs table: {tracker.view_url()}" + ("" if tracker.uri.startswith("http") else "  (after `make ui`)"))
    return JobResult(results, stats, parent, interrupted, extra={"verifier_time_s": dict(verifier.time_s)})

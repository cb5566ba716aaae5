"""Ablation tables from a synthetic MLflow store, against numbers worked out by hand."""

import math
import re
import shutil
import subprocess

import pandas as pd
import pytest
from mlflow.entities import Metric, RunTag
from mlflow.tracking import MlflowClient

from kforge.report.render import build_all, latex_escape
from kforge.report.runs import dedupe, kernel_timings, load_runs, timing_noise
from kforge.report.tables import COLUMNS, Context, ablation_table, by_iteration, fast_p_curve, geomean_speedup, rate

NEW = {"best": "best_speedup_vs_eager", "step": "speedup_vs_eager"}
OLD = {"best": "best_speedup_eager", "step": "speedup_eager"}  # runs logged before the metrics were renamed


def make_run(client, exp_id, parent, problem, level, mode, correct, speedup, status="FINISHED", history=None,
             model="m", names=NEW, best_kernel=None, precision=None):
    """``history``: (correct, speedup, kernel hash) per iteration; ``precision`` None: untagged (an older run)."""
    run = client.create_run(exp_id, run_name=problem, tags={
        "kforge.kind": "problem", "mlflow.parentRunId": parent, "problem": problem, "level": str(level),
        "model": model, "backend": "cpu", "loop_mode": mode, "reference": "none", "profiler": "none",
        "analysis": "off", "size": "cpu", "problems_source": "builtin", "device": "cpu",
        **({"precision": precision} if precision else {})})
    rid = run.info.run_id
    history = history if history is not None else [(correct, speedup, best_kernel)]
    metrics = [Metric("best_correct", float(correct), 0, 0), Metric("iterations", float(len(history)), 0, 0)]
    tags = [RunTag("best_kernel", best_kernel)] if best_kernel else []
    if speedup is not None:
        metrics.append(Metric(names["best"], speedup, 0, 0))
    for step, (ok, s, kernel) in enumerate(history):
        metrics.append(Metric("correct", float(ok), 0, step))
        if s is not None:
            metrics.append(Metric(names["step"], s, 0, step))
        if kernel:
            tags.append(RunTag(f"kernel.{step}", kernel))
    client.log_batch(rid, metrics=metrics, tags=tags)
    client.set_terminated(rid, status=status)
    return rid


@pytest.fixture
def store(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("kforge-single_vs_iterative", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    # single_shot, level 1: correct at 2.0x and 0.5x, one wrong  -> 2/3 correct, fast_1 1/3, geomean 1.0
    make_run(client, exp, parent, "level1/a", 1, "single_shot", True, 2.0, best_kernel="ka")
    make_run(client, exp, parent, "level1/b", 1, "single_shot", True, 0.5, best_kernel="kb0")
    make_run(client, exp, parent, "level1/c", 1, "single_shot", False, None)
    # An older run of the same configuration and problem (a repeated sweep): only the newest counts.
    make_run(client, exp, parent, "level1/c", 1, "iterative", False, None, history=[(0, None, None)] * 3)
    # iterative, level 1: 4.0x, 1.2x, 1.6x -> 3/3, fast_1 3/3, fast_1.5 2/3, geomean (4*1.2*1.6)^(1/3)
    # level1/a's first kernel is single_shot's kernel "ka", timed here at 1.8x (single shot said 2.0x).
    make_run(client, exp, parent, "level1/a", 1, "iterative", True, 4.0,
             history=[(1, 1.8, "ka"), (0, None, "kx"), (1, 4.0, "ka4")], best_kernel="ka4")
    make_run(client, exp, parent, "level1/b", 1, "iterative", True, 1.2,
             history=[(1, 1.2, "kb"), (1, 1.1, "kb1"), (0, None, "kb2")], best_kernel="kb")
    # Old metric names: read all the same.
    make_run(client, exp, parent, "level1/c", 1, "iterative", True, 1.6, names=OLD,
             history=[(0, None, None), (0, None, None), (1, 1.6, None)])
    make_run(client, exp, parent, "level1/d", 1, "iterative", True, 9.0, status="KILLED")  # killed: never counts
    return client


def table(store, **ctx):
    every = load_runs(store, "kforge-single_vs_iterative")
    return ablation_table(dedupe(every), "loop_mode", Context(timings=kernel_timings(every), **ctx))


def test_dedupe_keeps_newest_finished(store):
    runs = load_runs(store, "kforge-single_vs_iterative")
    assert len(runs) == 8
    kept = dedupe(runs)
    assert len(kept) == 6 and "level1/d" not in set(kept["problem"])


def test_table_numbers(store):
    t = table(store)
    row = t[(t.level == "1") & (t.loop_mode == "single_shot")].iloc[0]
    assert (row.n, row.correct.k, row.fast_1.k, row["fast_1.5"].k) == (3, 2, 1, 1)
    assert row.correct.text().startswith("2/3 [") and row.geomean_speedup.value == pytest.approx(1.0)
    row = t[(t.level == "1") & (t.loop_mode == "iterative")].iloc[0]
    assert (row.correct.k, row.fast_1.k, row["fast_1.5"].k) == (3, 3, 2)
    assert row.geomean_speedup.value == pytest.approx((4.0 * 1.2 * 1.6) ** (1 / 3))  # 1.6 read from the old name
    assert row.correct.text() == "3/3 [1.00, 1.00]"
    assert set(t.level) == {"1"}  # one level: no "all" row repeating it


def test_an_all_row_pools_several_levels(store):
    exp = store.get_experiment_by_name("kforge-single_vs_iterative").experiment_id
    make_run(store, exp, "p", "level2/e", 2, "iterative", True, 2.0)
    t = table(store)
    every = t[(t.level == "all") & (t.loop_mode == "iterative")].iloc[0]
    assert set(t.level) == {"1", "2", "all"} and (every.n, every.correct.k) == (4, 4)


def test_bootstrap_intervals_by_hand():
    two = pd.DataFrame({"correct": [True, True], "speedup_eager": [1.0, 4.0], "speedup_compile": [None, None]})
    # Resamples of two problems: {1,1}, {1,4}, {4,1}, {4,4}: geomeans 1, 2, 2, 4, a quarter each at the ends.
    g = geomean_speedup(two, Context())
    assert g.value == pytest.approx(2.0) and (g.lo, g.hi) == (pytest.approx(1.0), pytest.approx(4.0))
    half = rate(lambda grp, ctx: grp["speedup_eager"].to_numpy() > 2)(two, Context())
    assert (half.k, half.n, half.value, half.lo, half.hi) == (1, 2, 0.5, 0.0, 1.0)
    # More problems, a narrower interval around the same rate; the same seed gives the same interval.
    many = pd.DataFrame({"correct": [True, False] * 50, "speedup_eager": [2.0, None] * 50, "speedup_compile": None})
    r = rate(lambda grp, ctx: grp["correct"].to_numpy(dtype=bool))(many, Context())
    assert 0.35 < r.lo < 0.5 < r.hi < 0.65 and r == rate(lambda grp, ctx: grp["correct"].to_numpy(dtype=bool))(
        many, Context())


def test_each_rule_set_counts_the_problems_correct_under_it():
    """A problem PyTorch solved for the kernel is unsolved under kforge's rules and solved under KernelBench's;
    a run logged before the rule sets (no correct_kb) counts unsolved there, and fast_1 asks the same rule's
    speedup."""
    runs = pd.DataFrame({"correct": [True, False, False, False], "speedup_eager": [2.0, None, None, None],
                         "speedup_compile": None, "correct_kb": [True, True, True, None],
                         "speed_kb": [2.0, 1.5, 0.5, None]})
    cell = {c.key: c.value(runs, Context()) for c in COLUMNS if c.key in ("correct", "fast_1", "correct_kb",
                                                                           "fast_1_kb")}
    assert {k: (e.k, e.n) for k, e in cell.items()} == {"correct": (1, 4), "fast_1": (1, 4), "correct_kb": (3, 4),
                                                        "fast_1_kb": (2, 4)}


def test_identical_kernels_in_two_arms_show_their_timing_noise(tmp_path):
    # Issue 22: one oracle kernel per problem, timed in both arms, scored 0.41 and 0.30: noise only.
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("kforge-single_vs_iterative", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    make_run(client, exp, parent, "level1/a", 1, "single_shot", True, 0.41, model="oracle", best_kernel="k")
    make_run(client, exp, parent, "level1/a", 1, "iterative", True, 0.30, model="oracle", best_kernel="k",
             history=[(1, 0.30, "k"), (1, 0.29, "k")])
    every = load_runs(client, "kforge-single_vs_iterative")
    t = ablation_table(dedupe(every), "loop_mode", Context(timings=kernel_timings(every)))
    for _, row in t.iterrows():
        rng = row.timing_range
        assert (rng.lo, rng.hi, rng.retimed, rng.n) == (pytest.approx(0.29), pytest.approx(0.41), 1, 1)
        assert rng.lo <= row.geomean_speedup.value <= rng.hi
    noise = timing_noise(kernel_timings(every))
    assert noise.kernels == 1 and noise.worst == pytest.approx(0.41 / 0.29 - 1)
    files = build_all(client, tmp_path / "results", ["single_vs_iterative"])["single_vs_iterative"]["files"]
    md = files["md"].read_text()
    assert "| Single shot | 1/1 [100–100%] |" in md and "0.29–0.41 (1/1)" in md
    assert "oracle† on cpu at FP32, level 1, n = 1, none degenerate" in md and "† Not an LLM: kforge's hand-written" in md
    assert "Speedup is PyTorch eager's median time over the kernel's" in md and "a median of 41%" in md
    timings = pd.read_csv(files["timings"]).iloc[0]  # its columns say what they hold: speedups, not times
    assert timings["timings_n"] == 3 and timings["min_speedup_vs_eager"] == pytest.approx(0.29)  # 0.41, 0.30, 0.29
    assert timings["max_speedup_vs_eager"] == pytest.approx(0.41) and "min" not in timings.index


def test_runs_at_another_precision_are_another_row_and_the_caption_says_which(tmp_path):
    """One sweep at fp32 and again at bf16 into one store: the Single shot row pooled them (n = 12 for 6
    problems), their timing ranges too, and nothing said which precision a table showed."""
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("kforge-single_vs_iterative", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    for problem in ("level1/a", "level1/b"):  # the same kernel at both precisions: bf16 twice as fast
        make_run(client, exp, parent, problem, 1, "single_shot", True, 0.5, best_kernel="k")  # untagged: fp32
        make_run(client, exp, parent, problem, 1, "single_shot", True, 1.0, best_kernel="k", precision="bf16")
    every = load_runs(client, "kforge-single_vs_iterative")
    t = ablation_table(dedupe(every), "loop_mode", Context(timings=kernel_timings(every)))
    assert sorted(zip(t.precision, t.n, (g.value for g in t.geomean_speedup))) == [("bf16", 2, 1.0), ("fp32", 2, 0.5)]
    assert [(r.lo, r.hi) for r in t.timing_range] == [(1.0, 1.0), (0.5, 0.5)]  # no range across precisions
    md = build_all(client, tmp_path / "both", ["single_vs_iterative"])["single_vs_iterative"]["files"]["md"].read_text()
    assert "| Precision |" in md and "| BF16 |" in md and "by loop and precision; m on cpu, level 1, n = 2" in md
    assert "at FP32" not in md


def test_the_precision_ablation_keeps_precision_as_its_factor(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("kforge-precision_ablation", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    for precision, speedup in (("fp32", 0.5), ("bf16", 1.0)):
        make_run(client, exp, parent, "level1/a", 1, "iterative", True, speedup, precision=precision)
    res = build_all(client, tmp_path / "results", ["precision_ablation"])["precision_ablation"]
    assert sorted(res["table"]["precision"]) == ["bf16", "fp32"] and list(res["table"]["n"]) == [1, 1]
    md = res["files"]["md"].read_text()
    assert md.count("| Precision |") == 1 and "by precision; m on cpu, level 1, n = 1" in md and " at FP" not in md
    assert "over PyTorch eager at each row's own precision" in md  # a bf16 kernel's speedup is over bf16 eager
    assert list(pd.read_csv(res["files"]["csv"]).columns[:4]) == ["model", "backend", "level", "precision"]


def test_fast_p_curve(store):
    curve = fast_p_curve(dedupe(load_runs(store, "kforge-single_vs_iterative")), "loop_mode", ps=[0, 1.0, 1.5, 3.0])
    it = curve[curve.loop_mode == "iterative"].set_index("p")
    assert list(it["fast_p"]) == pytest.approx([1.0, 1.0, 2 / 3, 1 / 3]) and set(it["n"]) == {3}


def test_by_iteration(store):
    hist = by_iteration(dedupe(load_runs(store, "kforge-single_vs_iterative")), "loop_mode")
    it = hist[hist.loop_mode == "iterative"].set_index("iteration")
    # after it 1: a (1.8), b (1.2); after it 2: a 1.8, b 1.2; after it 3: a 4.0, b 1.2, c 1.6
    assert list(it.index) == [1, 2, 3] and set(it["n"]) == {3}
    assert list(it["correct_rate"]) == pytest.approx([2 / 3, 2 / 3, 1.0])
    assert it.loc[2, "geomean_speedup"] == pytest.approx(math.sqrt(1.8 * 1.2))
    assert it.loc[3, "geomean_speedup"] == pytest.approx((4.0 * 1.2 * 1.6) ** (1 / 3))
    # single shot: one iteration each; a problem that stopped early keeps its best to the last iteration
    assert list(hist[hist.loop_mode == "single_shot"]["iteration"]) == [1]


def test_files_written(store, tmp_path):
    res = build_all(store, tmp_path / "results", ["single_vs_iterative", "reference_transfer"], baseline="compile")
    files = res["single_vs_iterative"]["files"]
    md = files["md"].read_text()
    # What every row shares (model m, cpu, level 1, n = 3, no degenerate problem) is said once, in the caption.
    assert "| Iterative | 3/3 [100–100%] |" in md and "torch.compile of the reference" in md
    assert "| Loop | Correct (kforge) | fast_1 (kforge) | fast_1.5 (kforge) | Correct (KB) | fast_1 (KB) |" in md
    assert "by loop; m on cpu at FP32, level 1, n = 3, none degenerate." in md and "loop_mode" not in md
    assert "not an LLM" not in md  # model "m" stands for an LLM here
    csv = pd.read_csv(files["csv"])
    assert list(csv.columns[:8]) == ["model", "backend", "precision", "level", "loop_mode", "n", "correct_k", "correct"]
    assert set(csv["loop_mode"]) == {"single_shot", "iterative"}  # the CSV keeps the identifiers
    assert {"geomean_speedup_lo", "geomean_speedup_hi", "timing_range_retimed"} <= set(csv.columns)
    tex = files["tex"].read_text()
    assert "\\begin{tabular}" in tex and "\\scriptsize" not in tex and not re.search(r"\\small\b", tex)
    assert files["fast_p"].read_bytes()[:4] == b"\x89PNG" and files["iterations"].stat().st_size > 1000
    assert files["speedup"].read_bytes()[:4] == b"\x89PNG"
    assert res["reference_transfer"]["runs"] == 0


def test_latex_escapes_what_latex_reads_as_commands(store, tmp_path):
    assert latex_escape("loop_mode & 50% #1 $x {a} ~^\\ 0.3–0.4 oracle†") == (
        r"loop\_mode \& 50\% \#1 \$x \{a\} \textasciitilde{}\textasciicircum{}\textbackslash{} 0.3--0.4 "
        r"oracle\textsuperscript{\dag}")
    tex = build_all(store, tmp_path, ["single_vs_iterative"])["single_vs_iterative"]["files"]["tex"].read_text()
    # Every special character is escaped, but for the comment sign that ends the \resizebox line on purpose.
    body = "\n".join(line.removesuffix("{%") for line in tex.splitlines() if not line.startswith("%"))
    body = re.sub(r"fast\$_\{[\d.p]+\}\$", "fast", body)  # fast_p's subscript is LaTeX math on purpose
    assert re.search(r"(?<!\\)[_%&#$]", body.replace(" & ", " ").replace(r"\\", "")) is None, body
    assert r"\toprule" in tex and r"\bottomrule" in tex and r"\caption{" in tex and "fast$_{1.5}$" in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed (Debian: texlive-latex-base "
                    "texlive-latex-recommended)")
def test_latex_compiles_with_pdflatex(store, tmp_path):
    store.create_experiment("kforge-reference_transfer", artifact_location=(tmp_path / "art2").as_uri())
    exp = store.get_experiment_by_name("kforge-reference_transfer").experiment_id
    make_run(store, exp, "p", "level2/x_y", 2, "single_shot", True, 1.3, model="oracle")  # factor: reference=none
    res = build_all(store, tmp_path, ["single_vs_iterative", "reference_transfer"])
    # The preamble is what the files say they need, and nothing else.
    needs = {re.search(r"needs (\\usepackage\{.*\})", r["files"]["tex"].read_text()).group(1) for r in res.values()}
    for options in ("", "twocolumn"):  # a page, and a column of a two-column paper
        doc = tmp_path / "doc.tex"
        doc.write_text(f"\\documentclass[{options}]{{article}}\n" + "\n".join(sorted(needs)) + "\n\\begin{document}\n"
                       + "".join(f"\\input{{{r['files'][k].name}}}\n" for r in res.values() for k in ("tex", "notes"))
                       + "\\end{document}\n")
        out = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout[-3000:]
        assert (tmp_path / "doc.pdf").stat().st_size > 1000 and "Overfull" not in out.stdout


def test_a_table_narrow_enough_for_a_column_is_a_table_and_a_wide_one_spans_the_page():
    from kforge.report.render import to_latex
    narrow = to_latex(["Loop", "Geomean speedup"], [[("Iterative", ""), ("0.47", "[0.34–0.69]")]], "c", "x")
    wide = to_latex(["Model", "Level", "Loop", *["Correct (kforge)"] * 5],
                    [[("claude-opus-4-5", ""), ("1", ""), ("Single shot", ""), *[("10/12", "[58–100%]")] * 5]], "c", "y")
    assert "\\begin{table}[htbp]" in narrow and "\\begin{table*}[htbp]" in wide and "\\end{table*}" in wide


def test_a_models_name_prints_once_for_its_block_of_rows():
    from kforge.report.render import to_latex
    rows = [[("gpt-5", ""), ("1", ""), ("Iterative", "")], [("gpt-5", ""), ("1", ""), ("Single shot", "")],
            [("gpt-5", ""), ("2", ""), ("Iterative", "")], [("opus", ""), ("1", ""), ("Iterative", "")]]
    body = to_latex(["Model", "Level", "Loop"], rows, "c", "z", lead=2).split("\\midrule\n")[1]
    lines = [line for line in body.splitlines() if line.endswith("\\\\")]
    assert lines == ["gpt-5 & 1 & Iterative \\\\", " &  & Single shot \\\\", " & 2 & Iterative \\\\",
                     "opus & 1 & Iterative \\\\"]
    assert body.count("\\addlinespace") == 1  # a space between the models' blocks


def test_kernel_share_column_and_degenerate_problems_apart(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("kforge-single_vs_iterative", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    runs = {"level1/a": (2.0, 0.9, ""), "level1/b": (0.5, 0.3, ""),
            # the audit says a constant passes this one: its 100x means nothing
            "level1/z": (100.0, 1.0, "degenerate,launch_bound")}
    for problem, (speedup, share, flags) in runs.items():
        rid = make_run(client, exp, parent, problem, 1, "iterative", True, speedup)
        client.log_batch(rid, metrics=[Metric("best_kernel_share", share, 0, 0)],
                         tags=[RunTag("problem_flags", flags)])
    df = dedupe(load_runs(client, "kforge-single_vs_iterative"))
    row = ablation_table(df, "loop_mode").query("level == '1'").iloc[0]
    assert row["n"] == 3 and row["correct"].k == 3 and row["degenerate"] == 1
    assert (row["fast_1"].k, row["fast_1"].n) == (1, 2)  # level1/z is left out
    assert row["geomean_speedup"].value == pytest.approx(1.0) and row["kernel_share"].value == pytest.approx(0.6)
    everything = ablation_table(df, "loop_mode", Context(include_degenerate=True)).query("level == '1'").iloc[0]
    assert everything["fast_1"].k == 2 and everything["geomean_speedup"].value == pytest.approx(100 ** (1 / 3))
    curve = fast_p_curve(df, "loop_mode")
    assert set(curve["n"]) == {2}


def test_a_problem_degenerate_under_kernelbenchs_comparison_alone_leaves_its_columns_alone(tmp_path):
    """At bf16 a constant passes KernelBench's 1e-2 on a softmax over long rows and not the kforge rules'
    comparison: the KB columns leave the problem out, the kforge ones keep it."""
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("kforge-single_vs_iterative", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    for problem, flags in (("level1/a", ""), ("level1/softmax", "degenerate_kernelbench")):
        rid = make_run(client, exp, parent, problem, 1, "iterative", True, 2.0)
        client.log_batch(rid, metrics=[Metric("correct_kernelbench", 1.0, 0, 0)], tags=[RunTag("problem_flags", flags)])
    row = ablation_table(dedupe(load_runs(client, "kforge-single_vs_iterative")), "loop_mode").iloc[0]
    assert (row["fast_1"].k, row["fast_1"].n) == (2, 2)
    assert (row["fast_1_kb"].k, row["fast_1_kb"].n) == (1, 1)


def test_the_caption_is_short_and_the_notes_stand_beside_the_table(store, tmp_path):
    """A paper takes the caption as it is: a sentence or two; what each column means is in the notes."""
    files = build_all(store, tmp_path, ["single_vs_iterative"])["single_vs_iterative"]["files"]
    tex = files["tex"].read_text()
    correctness, speed = re.findall(r"\\caption\{(.*)\}", tex)
    for cap in (correctness, speed):
        assert len(cap.split()) <= 45 and cap.count(". ") <= 2, cap
        assert cap.startswith("Single vs iterative: ") and "by loop;" in cap and "Brackets: 95" in cap
    assert "problems solved (k/n) and fast$_{p}$ over PyTorch eager" in correctness
    assert "geomean speedup of correct kernels over PyTorch eager" in speed
    notes = files["notes"].read_text()
    assert "timing range" in notes and "tab:single-vs-iterative-correctness" in notes and "fast$_{p}$" in notes
    body = notes.split("\n", 1)[1].strip()
    assert body.count(". ") + 1 <= 3 and len(body.split()) <= 110, body  # two or three sentences
    assert files["notes"].name in tex.splitlines()[0]  # the table's first line says where its notes are
    md = files["md"].read_text()
    assert md.startswith("### Single vs iterative\n") and "\nNotes. Speedup is PyTorch eager's median time" in md


def test_within_noise_counts_problems_whose_speedup_interval_spans_one(tmp_path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.create_experiment("kforge-single_vs_iterative", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(exp).info.run_id
    for problem, (speedup, lo, hi) in {"level1/a": (1.1, 0.9, 1.3), "level1/b": (1.6, 1.4, 1.8),
                                       "level1/c": (0.95, 0.8, 1.05)}.items():
        rid = make_run(client, exp, parent, problem, 1, "iterative", True, speedup)
        client.log_batch(rid, metrics=[Metric("best_speedup_vs_eager_lo", lo, 0, 0),
                                       Metric("best_speedup_vs_eager_hi", hi, 0, 0)])
    make_run(client, exp, parent, "level1/a", 1, "single_shot", True, 1.2)  # logged before intervals were
    t = ablation_table(dedupe(load_runs(client, "kforge-single_vs_iterative")), "loop_mode").set_index("loop_mode")
    assert t.loc["iterative", "within_noise"] == 2 and t.loc["iterative", "fast_1"].k == 2  # a: faster, within noise
    assert t.loc["single_shot", "within_noise"] == "-"


def test_the_transfer_matrix_pairs_each_source_with_the_targets_own_run_without_a_reference():
    import pandas as pd

    from kforge.report.transfer import transfer_markdown, transfer_matrix
    rows = [("cpu", "none", "p1", True), ("cpu", "none", "p2", False),
            ("cpu", "oracle:opencl", "p1", True), ("cpu", "oracle:opencl", "p2", True),
            ("cpu", "oracle:triton", "p1", False),
            ("opencl", "oracle:cpu", "p1", True)]  # no run of opencl without a reference: no cell
    runs = pd.DataFrame([{"model": "m", "backend": b, "reference": r, "problem": p, "correct": c}
                         for b, r, p, c in rows])
    m = transfer_matrix(runs)
    got = {(r.source, r.target): (r.n, r.correct_with, r.correct_without) for r in m.itertuples()}
    assert got == {("opencl", "cpu"): (2, 2, 1), ("triton", "cpu"): (1, 0, 1)}
    md = transfer_markdown(m)
    assert "| opencl | 2/2 (1/2 without) |" in md and "| triton | 0/1 (1/1 without) |" in md
    assert transfer_matrix(pd.DataFrame()).empty

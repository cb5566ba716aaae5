from kforge.candidate import Candidate, extract_code, own_seed_hint

PROGRAM = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_picks_the_block_defining_modelnew():
    reply = f"Plan first.\n```cpp\n__global__ void k() {{}}\n```\nThen:\n```python\n{PROGRAM}```\nDone."
    source, error = extract_code(reply)
    assert source == PROGRAM and error is None


def test_last_of_several_programs_wins():
    second = PROGRAM.replace("pass", "x = 2")
    source, _ = extract_code(f"```python\n{PROGRAM}```\nbetter:\n```python\n{second}```")
    assert "x = 2" in source


def test_a_usage_example_after_the_program_is_not_the_program():
    """Models end replies with how to use their answer; its import binds `ModelNew` too, and was judged instead
    (`ModuleNotFoundError: No module named 'model_new'`)."""
    usage = "import torch\nfrom model_new import ModelNew\n\nm = ModelNew()\nprint(m(torch.randn(4)))\n"
    source, _ = extract_code(f"Here it is:\n```python\n{PROGRAM}```\nUsage:\n```python\n{usage}```")
    assert source == PROGRAM
    assert extract_code(f"```python\n{usage}```")[0] == usage  # the only block: the run says what it lacks


def test_unclosed_fence_at_end_still_extracts():
    source, _ = extract_code(f"```python\n{PROGRAM}")
    assert source == PROGRAM


def test_no_code_is_a_generation_failure_with_reason():
    c = Candidate.from_reply("I cannot help with that.")
    assert c.source is None and "no code block" in c.error
    c = Candidate.from_reply("```python\nprint('hi')\n```")
    assert c.source is None and "none binds `ModelNew`" in c.error
    assert Candidate.from_reply("").error == "the reply is empty"


def test_bare_program_reply_and_source():
    assert Candidate.from_reply(PROGRAM).source == PROGRAM
    assert Candidate.from_source("x = 1").source is None


ALIASED = '''
import torch.nn as nn


class FusedRelu(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)


ModelNew = FusedRelu
'''


def test_modelnew_bound_any_way_python_allows_is_a_program():
    """KernelBench executes the program and takes `ModelNew` from its namespace: every binding counts."""
    bindings = [
        "ModelNew = FusedRelu",
        "ModelNew: type = FusedRelu",
        "from my_kernels import FusedRelu as ModelNew",
        "import fused_relu as ModelNew",
        "def ModelNew(*args):\n    return FusedRelu(*args)",
        "if FAST:\n    ModelNew = FusedRelu\nelse:\n    ModelNew = Model",
        "try:\n    ModelNew = build()\nexcept ImportError:\n    ModelNew = FusedRelu",
        "Model, ModelNew = Model, FusedRelu",
        "(ModelNew := FusedRelu)",
        'globals()["ModelNew"] = FusedRelu',
        "def _register():\n    global ModelNew\n    ModelNew = FusedRelu\n\n\n_register()",
    ]
    for b in bindings:
        assert Candidate.from_source(ALIASED.replace("ModelNew = FusedRelu", b)).source, b
        assert extract_code(f"```python\n{ALIASED.replace('ModelNew = FusedRelu', b)}```")[0], b


def test_a_program_binding_nothing_says_so():
    for source in ("class Model2(torch.nn.Module):\n    pass\n",
                   "def f():\n    ModelNew = 1\n",  # a function's local, not the module's
                   "class Outer:\n    ModelNew = 1\n",
                   "x = ModelNew\n", "if ModelNew == 1:\n    pass\n"):
        c = Candidate.from_source(source)
        assert c.source is None and "binds no `ModelNew`" in c.error, source
    c = Candidate.from_reply("```python\nclass FusedRelu:\n    pass\n```")
    assert c.source is None and "none binds `ModelNew`" in c.error


def test_a_program_that_does_not_parse_is_judged_by_its_text():
    """The build reports the syntax error; it must get there."""
    assert Candidate.from_source("ModelNew = FusedRelu(\n").source
    assert Candidate.from_source("class ModelNew(nn.Module:\n    pass\n").source
    assert Candidate.from_source("x = (\n").source is None


def test_a_binding_under_the_main_guard_alone_is_told_apart():
    """A harness executing the program never enters `if __name__ == "__main__":`; the run's message says so."""
    from kforge.candidate import bound_under_main_only
    guarded = ALIASED.replace("ModelNew = FusedRelu", 'if __name__ == "__main__":\n    ModelNew = FusedRelu')
    assert Candidate.from_source(guarded).source  # the static pass lets the run judge it
    assert bound_under_main_only(guarded)
    assert not bound_under_main_only(ALIASED) and not bound_under_main_only(guarded + "\nModelNew = FusedRelu\n")


def test_a_program_whose_docstring_shows_a_fenced_example_is_the_whole_program(tmp_path):
    """A .py file with a Markdown usage example in its docstring was read as a reply: none of its blocks bound
    ModelNew (`generation_failure`), or one that did, the example, was judged instead of the program."""
    from kforge.evaluate.runner import read_candidate
    example = "Usage:\n\n```python\nclass ModelNew:  # the example's stand-in\n    pass\nm = ModelNew()\n```\n"
    program = f'"""Fused ReLU.\n\n{example}"""\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    x = 1\n'
    path = tmp_path / "level_1_problem_1_sample_0_kernel.py"
    path.write_text(program)
    assert read_candidate(path).source == program
    assert extract_code(program) == (program, None)


def test_a_block_fenced_inside_a_list_item_loses_the_items_indent():
    """Fenced three columns in (a numbered list's step), the block kept that indent and did not parse."""
    body = "\n".join("   " + line if line else "" for line in PROGRAM.splitlines())
    reply = f"Steps:\n\n1. Write the module:\n\n   ```python\n{body}\n   ```\n\n2. Run it.\n"
    assert extract_code(reply) == (PROGRAM, None)


def test_a_program_split_over_two_blocks_is_told_to_join_them():
    from kforge.candidate import split_program_hint
    kernel = "from torch.utils.cpp_extension import load_inline\nrelu_ext = load_inline(name='r', cpp_sources='')\n"
    model = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return relu_ext.f(x)\n"
    reply = f"First the kernel:\n```python\n{kernel}```\nThen the module:\n```python\n{model}```\n"
    candidate = Candidate.from_reply(reply)
    assert candidate.source == model
    failed = "NameError in forward (trial 1 of 3): name 'relu_ext' is not defined"
    assert "`relu_ext` is defined in another code block" in split_program_hint(reply, candidate.source, failed)
    assert split_program_hint(reply, candidate.source, "NameError: name 'other' is not defined") == ""
    assert split_program_hint(None, model, failed) == ""


def test_a_mismatch_of_a_program_that_seeds_torch_itself_says_why():
    """KernelBench's harness seeds 42 before building each model, so a program that seeds 42 and builds its own
    copy of Model gets the reference's weights there; kforge's seed is secret, and the mismatch said nothing."""
    program = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self, n):\n"
               "        super().__init__()\n        torch.manual_seed(42)\n        self.inner = Model(n)\n")
    hint = own_seed_hint(program, "numerical_mismatch")
    assert "seeds torch's generator itself, line 8" in hint and "drop the call" in hint
    assert own_seed_hint(program, "correct") == "" and own_seed_hint(program.replace("manual_seed", "rand"),
                                                                      "numerical_mismatch") == ""
    selftest = program.replace("        torch.manual_seed(42)\n", "") + \
        '\n\nif __name__ == "__main__":\n    torch.manual_seed(0)\n'
    assert own_seed_hint(selftest, "numerical_mismatch") == ""  # a self-test no harness runs

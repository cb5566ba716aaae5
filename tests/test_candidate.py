from kforge.candidate import Candidate, extract_code

PROGRAM = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_picks_the_block_defining_modelnew():
    reply = f"Plan first.\n```cpp\n__global__ void k() {{}}\n```\nThen:\n```python\n{PROGRAM}```\nDone."
    source, error = extract_code(reply)
    assert source == PROGRAM and error is None


def test_last_of_several_programs_wins():
    second = PROGRAM.replace("pass", "x = 2")
    source, _ = extract_code(f"```python\n{PROGRAM}```\nbetter:\n```python\n{second}```")
    assert "x = 2" in source


def test_unclosed_fence_at_end_still_extracts():
    source, _ = extract_code(f"```python\n{PROGRAM}")
    assert source == PROGRAM


def test_no_code_is_a_generation_failure_with_reason():
    c = Candidate.from_reply("I cannot help with that.")
    assert c.source is None and "no code block" in c.error
    c = Candidate.from_reply("```python\nprint('hi')\n```")
    assert c.source is None and "none defines `class ModelNew`" in c.error
    assert Candidate.from_reply("").error == "the reply is empty"


def test_bare_program_reply_and_source():
    assert Candidate.from_reply(PROGRAM).source == PROGRAM
    assert Candidate.from_source("x = 1").source is None

"""The last shape-variant fallbacks (`kforge.verify.variants._aligned`, `_reverted`): a model that halves its image
until it is a sixteenth, and one that sizes a layer by its constructor's default rather than by the constant
`get_inputs` reads. Every earlier fallback fails there, so a kernel with those problems' sizes baked in used to
pass the kforge rules with every variant but the batch-only one skipped."""

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from kforge.verify.variants import _aligned, shape_variants
from tests.helpers import fast_config

# Pooled to a sixteenth and broadcast back, as a UNet's levels meet: height and width must be multiples of 16.
POOLED = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.mix = nn.Conv2d(2 * channels, channels, kernel_size=1)

    def forward(self, x):
        coarse = F.interpolate(F.avg_pool2d(x, 16), scale_factor=16, mode="nearest")
        return self.mix(torch.cat([x, coarse], dim=1))


batch_size = 1  # not varied: the test is of the other sizes
channels = 3
height = 64
width = 96


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
'''

# What a model writes after seeing 64 x 96 images: the 4 x 6 grid of 16-pixel cells, averaged by hand.
BAKED_GRID = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.mix = nn.Conv2d(2 * channels, channels, kernel_size=1)

    def forward(self, x):
        b, c = x.shape[:2]
        cells = x.reshape(b, c, 4, 16, 6, 16).mean(dim=(3, 5))  # 64 / 16 rows, 96 / 16 columns
        coarse = cells.repeat_interleave(16, dim=2).repeat_interleave(16, dim=3)
        return self.mix(torch.cat([x, coarse], dim=1))
'''

# KernelBench's level3/32 in small: the Linear is sized by the constructor's default image size, which
# `get_init_inputs` does not pass, so the reference runs only where image_size keeps its value.
DEFAULTED = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, num_classes, image_size=16):
        super().__init__()
        self.head = nn.Linear(dim * image_size, num_classes)

    def forward(self, x):
        return torch.relu(self.head(x.flatten(1)))


batch_size = 10
dim = 24
image_size = 16
num_classes = 40


def get_inputs():
    return [torch.randn(batch_size, dim, image_size)]


def get_init_inputs():
    return [dim, num_classes]
'''

# A model-style candidate with the 40 classes it was shown baked into its output.
BAKED_CLASSES = '''import torch
import torch.nn as nn

NUM_CLASSES = 40


class ModelNew(nn.Module):
    def __init__(self, dim, num_classes, image_size=16):
        super().__init__()
        self.head = nn.Linear(dim * image_size, num_classes)

    def forward(self, x):
        logits = torch.addmm(self.head.bias, x.flatten(1), self.head.weight.t())
        return torch.relu(logits).view(-1, NUM_CLASSES)
'''


def test_the_last_fallbacks_are_aligned_sizes_then_one_constant_back():
    first, half, larger = shape_variants(problem_from_source(POOLED, where="pooled.py", name="pooled"))
    assert first.overrides == {"height": 47, "width": 71}
    # Odd multiples of 24, kept apart (two steps) and then not; the nearest multiples of 16 below 64 and 96; the power
    # of two halved; the first with each constant back in turn.
    assert first.fallbacks == [{"height": 24, "width": 72}, {"height": 24, "width": 24}, {"height": 48, "width": 64},
                               {"height": 32, "width": 71},
                               {"height": 64, "width": 24}, {"height": 24, "width": 96}]
    assert half.fallbacks == [{"height": 24}, {"height": 32}]  # nothing else changes: nothing to put back
    assert larger.fallbacks[1] == {"height": 80, "width": 112}  # above the problem's, as the variant is
    # A shape written as a tuple keeps the elements the variant left alone, zeros and floats among them.
    assert _aligned({"shape": (0, 47, 2.5)}, {"shape": (0, 64, 2.5)}) == {"shape": (0, 48, 2.5)}
    first = shape_variants(problem_from_source(DEFAULTED, where="defaulted.py", name="defaulted"))[0]
    assert first.overrides == {"batch_size": 7, "dim": 17, "image_size": 11, "num_classes": 29}
    # The step fallback (odd multiples of 24) with each constant back in turn; image_size's is the one that runs;
    # then the proportional one's (num_classes 28, a multiple of the batch's 7) likewise.
    assert [f["num_classes"] for f in first.fallbacks[9:]] == [28, 28, 28]
    assert first.fallbacks[5:9] == [{"batch_size": 10, "dim": 17, "image_size": 11, "num_classes": 24},
                                    {"batch_size": 7, "dim": 24, "image_size": 11, "num_classes": 24},
                                    {"batch_size": 7, "dim": 17, "image_size": 16, "num_classes": 24},
                                    {"batch_size": 7, "dim": 17, "image_size": 11, "num_classes": 40}]


def _judged(pool, source: str, name: str, baked: str):
    p = problem_from_source(source, where=f"{name}.py", name=name)
    verifier = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool)
    itself = verifier.verify(p, source.replace("class Model(", "class ModelNew("), "cpu")
    assert itself.state is State.CORRECT, itself.summary()
    assert not any("skipped" in n for n in itself.evidence.notes), itself.evidence.notes
    return itself, verifier.verify(p, baked, "cpu")


def test_sizes_baked_into_a_model_that_pools_to_a_sixteenth_fail_at_aligned_sizes(pool):
    itself, baked = _judged(pool, POOLED, "pooled", BAKED_GRID)
    assert any("height=48, width=64 (for height=47, width=71," in n for n in itself.evidence.notes), \
        itself.evidence.notes
    assert baked.states["kernelbench"] == "correct", baked.summary()
    assert baked.state is not State.CORRECT, baked.summary()
    assert "shape variant height=" in baked.message, baked.message


def test_a_class_count_baked_in_fails_where_one_constant_goes_back(pool):
    itself, baked = _judged(pool, DEFAULTED, "defaulted", BAKED_CLASSES)
    assert any("image_size=16, num_classes=24 (for" in n for n in itself.evidence.notes), itself.evidence.notes
    assert baked.states["kernelbench"] == "correct", baked.summary()
    assert baked.state is not State.CORRECT, baked.summary()
    assert "num_classes=24" in baked.message, baked.message

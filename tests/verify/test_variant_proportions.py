"""Shape variants in the problem's own proportions (`kforge.verify.variants._proportional`): a model that asks one
size to divide another (an image its patch size, a sequence its block length) keeps a variant where rounding the
sizes to a step cannot, and a candidate that baked the patch count it was shown is caught there."""

from kforge.problems import problem_from_source
from kforge.verify import State, Verifier
from kforge.verify.variants import shape_variants
from tests.helpers import fast_config

# A patch embedding as vision models write it: the image must be a whole number of patches.
PATCHES = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, image_size, patch_size, channels, dim):
        super().__init__()
        assert image_size % patch_size == 0, "Image dimensions must be divisible by the patch size."
        self.patch_size = patch_size
        self.proj = nn.Linear(channels * patch_size * patch_size, dim)

    def forward(self, img):
        p = self.patch_size
        b, c, h, w = img.shape
        x = img.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5)
        return self.proj(x.reshape(b, (h // p) * (w // p), c * p * p))


image_size = 96
patch_size = 16
channels = 3
dim = 40


def get_inputs():
    return [torch.randn(2, channels, image_size, image_size)]


def get_init_inputs():
    return [image_size, patch_size, channels, dim]
'''

# What a model writes after seeing 96 x 96 images in 16 x 16 patches: 36 patches, unfolded by hand.
BAKED_PATCHES = '''import torch
import torch.nn as nn

NUM_PATCHES = 36  # (96 // 16) ** 2


class ModelNew(nn.Module):
    def __init__(self, image_size, patch_size, channels, dim):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Linear(channels * patch_size * patch_size, dim)

    def forward(self, img):
        p = self.patch_size
        b = img.shape[0]
        x = img.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).contiguous()
        x = x.view(b, NUM_PATCHES, -1)
        return torch.addmm(self.proj.bias, x.view(-1, x.shape[-1]), self.proj.weight.t()).view(b, NUM_PATCHES, -1)
'''


def test_a_size_another_divides_keeps_the_multiple_in_the_proportional_fallback():
    """KernelBench's level3/28 in small: its image alone at about half (111 of 224) is no multiple of its 16-pixel
    patch, nor is either step fallback (72); the proportional one is (96). Where the variant changes the patch
    too, every size it divides in the problem follows it: a patch of 11 makes the image 154 and the 512-wide
    embedding 352, whose MLP (2048, four embeddings) becomes 1408."""
    vit = problem_from_source(PATCHES.replace("image_size = 96", "image_size = 224").replace(
        "dim = 40", "dim = 512\nmlp_dim = 2048"), where="vit.py", name="vit")
    first, half, larger = shape_variants(vit)
    assert half.overrides == {"image_size": 111}
    assert half.fallbacks[:2] == [{"image_size": 72}, {"image_size": 96}]
    assert first.overrides == {"image_size": 167, "patch_size": 11, "dim": 383, "mlp_dim": 1535}
    assert first.fallbacks[2] == {"image_size": 154, "patch_size": 11, "dim": 352, "mlp_dim": 1408}
    assert larger.fallbacks[2] == {"image_size": 238, "patch_size": 17, "dim": 544, "mlp_dim": 2176}
    # A sequence in blocks (Mamba2's chunked scan): the block length follows the state size it is a multiple of.
    scan = problem_from_source(PATCHES.replace("image_size = 96", "seq_length = 128").replace(
        "patch_size = 16", "block_len = 64").replace("dim = 40", "d_state = 16").replace(
        "image_size, patch_size, channels, dim]", "seq_length, block_len, channels, d_state]"),
        where="scan.py", name="scan")
    assert shape_variants(scan)[0].fallbacks[2] == {"seq_length": 88, "block_len": 44, "d_state": 11}


def test_a_patch_count_baked_in_fails_where_the_variant_keeps_whole_patches(pool):
    """The reference runs at the half-size image (47 pixels) only in proportion (32 pixels, 4 patches): the
    problem's own model is correct there and checked, not skipped; the candidate that baked 36 patches is not
    correct under the kforge rules, and is under KernelBench's, which judge one shape."""
    p = problem_from_source(PATCHES, where="patches.py", name="patches")
    verifier = Verifier(fast_config(variants=True, require_kernel=False, skip_timing=True), pool=pool)
    itself = verifier.verify(p, PATCHES.replace("class Model(", "class ModelNew("), "cpu")
    assert itself.state is State.CORRECT, itself.summary()
    assert not any("skipped" in n for n in itself.evidence.notes), itself.evidence.notes
    assert any("image_size=32 (for image_size=47," in n for n in itself.evidence.notes), itself.evidence.notes
    baked = verifier.verify(p, BAKED_PATCHES, "cpu")
    assert baked.states["kernelbench"] == "correct", baked.summary()
    assert baked.state is not State.CORRECT, baked.summary()
    assert "shape variant image_size=" in baked.message, baked.message

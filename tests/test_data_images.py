import pytest
import torch
from selfattn.data.images import (
    COLORS,
    SHAPES,
    SIZES,
    caption_vocab,
    make_shapes,
    patch_coverage,
    patchify,
)


def test_deterministic_and_consistent():
    a, b = make_shapes(50, seed=3), make_shapes(50, seed=3)
    assert torch.equal(a.images, b.images) and a.captions == b.captions
    assert not torch.equal(a.images, make_shapes(50, seed=4).images)
    assert a.images.shape == (50, 3, 24, 24) and a.images.dtype == torch.float32
    assert a.masks.shape == (50, 24, 24) and a.masks.any(dim=(1, 2)).all()
    for i in range(50):
        assert (
            a.captions[i] == f"a {SIZES[a.sizes[i]]} {COLORS[a.colors[i]]} {SHAPES[a.shapes[i]]}"
        )
        # the shape is drawn in its colour's channel: that channel is brightest on the shape's
        # pixels
        on = a.images[i][:, a.masks[i]].mean(dim=1)
        assert on.argmax().item() == [0, 1, 2][a.colors[i]]
    caption_vocab().encode(" ".join(a.captions).split())


def test_big_shapes_are_bigger():
    s = make_shapes(400, seed=0)
    area = s.masks.float().sum(dim=(1, 2))
    for k in range(len(SHAPES)):  # shape by shape: a big one covers more pixels than any small one
        big, small = area[(s.shapes == k) & (s.sizes == 1)], area[(s.shapes == k) & (s.sizes == 0)]
        assert big.min() > small.max(), SHAPES[k]
    assert area[s.sizes == 1].mean() > 2 * area[s.sizes == 0].mean()


def test_grid_layout_keeps_each_shape_mostly_in_one_patch():
    s = make_shapes(200, image_size=40, grid=4, seed=1)
    cov = patch_coverage(s.masks, 10) * 100  # pixels of each patch covered
    pixels = s.masks.float().sum(dim=(1, 2))
    assert (cov.max(dim=1).values / pixels > 0.6).all()
    with pytest.raises(ValueError, match="grid"):
        make_shapes(3, image_size=40, grid=3)


def test_patchify_order_and_inverse():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    p = patchify(x, 4)
    assert p.shape == (2, 4, 48)
    # patch 1 is row 0, column 1: pixels [0:4, 4:8] of every channel
    assert torch.equal(p[1, 1], x[1, :, 0:4, 4:8].reshape(-1))
    assert torch.equal(p[0, 2], x[0, :, 4:8, 0:4].reshape(-1))
    with pytest.raises(ValueError, match="multiple of patch=3"):
        patchify(x, 3)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        patchify(x[0], 4)


def test_patch_coverage_sums_to_the_area():
    s = make_shapes(20, seed=2)
    cov = patch_coverage(s.masks, 4)
    assert cov.shape == (20, 36) and cov.min() >= 0 and cov.max() <= 1
    assert torch.allclose(cov.sum(1) * 16, s.masks.float().sum(dim=(1, 2)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        make_shapes(0)
    with pytest.raises(ValueError, match="at least 16"):
        make_shapes(2, image_size=8)

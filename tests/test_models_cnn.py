"""selfattn.models.cnn: the parameter-matched convolutional baseline of chapter 9."""

from __future__ import annotations

import pytest
import torch
from selfattn.models import MiniViT, count_parameters
from selfattn.models.cnn import SmallCNN


@pytest.mark.parametrize("width", [1, 8, 36])
def test_parameters_for_counts_the_parameters(width):
    model = SmallCNN(4, width=width)
    assert SmallCNN.parameters_for(4, width) == count_parameters(model)


def test_matching_the_chapter_vit():
    vit = count_parameters(MiniViT(4, image_size=40, patch=10))
    cnn = SmallCNN.matching(4, vit)
    assert abs(count_parameters(cnn) - vit) / vit < 0.02
    for w in (cnn.head.in_features // 4 - 1, cnn.head.in_features // 4 + 1):
        assert abs(SmallCNN.parameters_for(4, w) - vit) >= abs(count_parameters(cnn) - vit)


def test_forward_shapes_and_bad_input():
    model = SmallCNN(4, width=4)
    assert model(torch.randn(2, 3, 40, 40)).shape == (2, 4)
    assert model(torch.randn(1, 3, 24, 24)).shape == (1, 4)
    with pytest.raises(ValueError, match="images must have shape"):
        model(torch.randn(2, 1, 40, 40))
    with pytest.raises(TypeError, match="images"):
        model([[1.0]])
    with pytest.raises(ValueError, match="width"):
        SmallCNN(4, width=0)

"""Chapter 11's explorer (the KV-cache calculator) and the cache sizes it plots."""

import matplotlib
import pytest
from selfattn.cache_sizes import PUBLISHED, AttentionConfig, bytes_per_token, cache_bytes
from selfattn.widgets import ch11, view_values, visible_view

matplotlib.use("Agg")


def test_cache_sizes_from_the_published_configs():
    assert bytes_per_token(PUBLISHED["Llama 3 8B"]) * 32 == 131072
    assert cache_bytes(PUBLISHED["Qwen3 8B"], 1) == 36 * 2 * 8 * 128 * 2
    assert cache_bytes(PUBLISHED["DeepSeek-V3"], 10) == 10 * 61 * 576 * 2
    gemma = PUBLISHED["Gemma 3 27B"]
    per = 2 * 16 * 128 * 2
    assert cache_bytes(gemma, 100) == 62 * 100 * per
    assert cache_bytes(gemma, 4096) == (10 * 4096 + 52 * 1024) * per
    oss = PUBLISHED["gpt-oss-120b"]
    assert cache_bytes(oss, 1000, batch=2) == 2 * (18 * 1000 + 18 * 128) * 2 * 8 * 64 * 2
    with pytest.raises(TypeError, match="AttentionConfig"):
        bytes_per_token("Llama")
    with pytest.raises(ValueError, match="context"):
        cache_bytes(gemma, -1)
    assert isinstance(gemma, AttentionConfig)


def test_explorer_views_follow_the_controls():
    import ipywidgets
    import matplotlib.pyplot as plt

    ax = ch11.plot_cache_growth("Llama 3 8B", 4096)
    assert "Llama 3 8B" in ax.get_title() and len(ax.lines) == len(PUBLISHED)
    plt.close("all")
    box = ch11.explorer(["Llama 3 8B", "DeepSeek-V3"], (4096, 8192), model="Llama 3 8B")
    assert isinstance(box, ipywidgets.VBox) and box.grid_size == 4
    dropdown, slider = box.controls
    assert view_values(visible_view(box)) == ["Llama 3 8B", "8K"]
    dropdown.value = "DeepSeek-V3"
    slider.value = 4096
    assert view_values(visible_view(box)) == ["DeepSeek-V3", "4K"]
    assert "DeepSeek-V3 highlighted" in visible_view(box)
    with pytest.raises(ValueError, match="unknown model"):
        ch11.explorer(["GPT-5"])
    with pytest.raises(ValueError, match="chosen"):
        ch11.plot_cache_growth("GPT-5")

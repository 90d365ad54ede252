import pytest
from selfattn.data import Vocab


def test_roundtrip_and_padding():
    v = Vocab(["a", "b", "c"])
    assert len(v) == 4 and v.pad_id == 0
    ids = v.encode(["c", "a"])
    assert ids.tolist() == [3, 1]
    assert v.decode(ids.tolist() + [0, 0]) == ["c", "a"]
    assert v.decode([0, 1], skip_pad=False) == ["<pad>", "a"]


def test_errors():
    with pytest.raises(ValueError, match="duplicate.*'a'"):
        Vocab(["a", "a"])
    with pytest.raises(KeyError, match="zz"):
        Vocab(["a"]).encode(["zz"])

"""docs/design.md's layering list names every layer of ``tests/test_layering.py``'s table,
each module in its layer (issue 53, point 6)."""

import re

from test_layering import LAYERS  # tests/ is on the path (it holds conftest.py)

from tools.book import ROOT


def _documented() -> dict[str, int]:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    items = re.findall(r"^- \*\*(\d), [^*]+\*\*:(.*(?:\n  .*)*)", text, re.M)
    assert items, "docs/design.md: no layering list (- **N, name**: `module`, ...)"
    found = {}
    for layer, body in items:
        for name in re.findall(r"`([\w./]+)`", body):
            found[name.replace("/", ".")] = int(layer)
    return found


def test_every_module_of_the_layering_table_is_in_its_layer_in_the_design_notes():
    documented = _documented()
    table = {k.removeprefix("selfattn."): v for k, v in LAYERS.items() if k != "selfattn"}
    wrong = {
        m: (layer, documented.get(m)) for m, layer in table.items() if documented.get(m) != layer
    }
    assert not wrong, (
        "list each module in its layer in docs/design.md's layering list too; module: "
        f"(layer in tests/test_layering.py, in docs/design.md): {wrong}"
    )

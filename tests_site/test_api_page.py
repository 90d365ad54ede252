"""The built API reference page documents every public name of selfattn.

The public names come from tests/test_api_reference.py (every ``__all__``); what is
documented comes from Sphinx itself, its inventory of the built site (``objects.inv``, the
file intersphinx reads), so no parser of api.md or of the HTML stands between them.
"""

from __future__ import annotations

import importlib
import types

import pytest
from conftest import SITE_HTML

from tests.test_api_reference import public_api  # tests/test_api_reference.py


def resolve(target: str):
    """The object a documented id such as ``selfattn.attention.softmax`` names (or None)."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


@pytest.fixture(scope="module")
def documented():
    """What Sphinx documented, from its own inventory of the built site (objects.inv):
    the objects (by identity) and the modules."""
    import posixpath

    from sphinx.util.inventory import InventoryFile

    with open(SITE_HTML / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", posixpath.join)
    objects, modules = set(), set()
    for kind, entries in inventory.items():
        if kind == "py:module":
            modules.update(entries)
        elif kind.startswith("py:"):
            for name, (_, _, location, _) in entries.items():
                if location.startswith("api.html#"):
                    objects.add(id(resolve(name)))
    return objects, modules


API = public_api()


@pytest.mark.parametrize("qualname,obj", API, ids=[q for q, _ in API])
def test_public_name_is_on_the_built_api_page(qualname, obj, documented):
    objects, modules = documented
    if isinstance(obj, types.ModuleType):
        assert obj.__name__ in modules, (
            f"{qualname}: no section for module {obj.__name__} on api.html"
        )
    else:
        assert id(obj) in objects, (
            f"{qualname} is not documented on api.html (see tests/test_api_reference.py)"
        )


def test_api_page_is_rendered_in_the_browser(site_page):
    page, log = site_page("api.html")
    assert page.locator("dl.py.function, dl.py.class").count() >= 5, (
        "api.html shows hardly any functions or classes"
    )
    assert not log.problems(), "\n  ".join(log.problems())

"""The API reference (api.md) documents every public name of selfattn.

Public names: everything in ``selfattn.__all__``, and everything in the ``__all__`` of
each public submodule (a module none of whose dotted parts starts with ``_``), except the
per-chapter helpers ``selfattn.exercises.chNN`` (checkers) and ``selfattn.widgets.chNN``
(explorers), which their chapters present and the package does not re-export.

Here: each has a docstring (autodoc skips members without one) or, for a constant, a ``#:``
comment. Whether api.md's ``automodule`` directives reach them is Sphinx's to say:
tests_site/test_api_page.py reads the built site's inventory (``objects.inv``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from functools import lru_cache

import pytest

from tools.book import ROOT

API_MD = ROOT / "api.md"
CHAPTER_HELPERS = re.compile(r"^selfattn\.(exercises|widgets)\.ch\d\d$")


@lru_cache(maxsize=1)
def public_modules() -> list[types.ModuleType]:
    """selfattn and its public submodules, imported (chapter helpers excluded)."""
    import selfattn

    mods = [selfattn]
    for info in pkgutil.walk_packages(selfattn.__path__, "selfattn."):
        if any(part.startswith("_") for part in info.name.split(".")) or CHAPTER_HELPERS.match(
            info.name
        ):
            continue
        mods.append(importlib.import_module(info.name))
    return mods


@lru_cache(maxsize=1)
def public_api() -> list[tuple[str, object]]:
    """(dotted name, object) for every public name, each object once.

    An object reachable under several names is listed under its first, shortest one.
    """
    names, seen = [], set()
    for mod in public_modules():
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if (name, id(obj)) not in seen:
                seen.add((name, id(obj)))
                names.append((f"{mod.__name__}.{name}", obj))
    return names


def _data_comments(module: types.ModuleType) -> set[str]:
    """Module-level names with a ``#:`` doc comment (what autodoc documents for data)."""
    from sphinx.pycode import ModuleAnalyzer

    try:
        return {name for (_, name) in ModuleAnalyzer.for_module(module.__name__).find_attr_docs()}
    except Exception:  # noqa: BLE001 - no source: nothing documented
        return set()


def is_documented(qualname: str, obj) -> bool:
    if isinstance(obj, types.ModuleType):
        return bool(obj.__doc__ and obj.__doc__.strip())
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__") or ""
        # dataclasses invent a docstring from the signature: that documents nothing
        return bool(doc.strip()) and not doc.startswith(f"{obj.__name__}(")
    if callable(obj):
        return bool(inspect.getdoc(obj))
    module_name, _, name = qualname.rpartition(".")
    return any(
        name in _data_comments(m) for m in public_modules() if getattr(m, name, None) is obj
    )


API = public_api()


def test_api_page_exists_and_is_linked_from_the_intro():
    assert API_MD.exists()
    assert "api.md" in (ROOT / "intro.md").read_text(), (
        "intro.md must link to the API reference (api.md)"
    )
    toc = (ROOT / "_toc.yml").read_text()
    assert re.search(r"^\s*-\s*file:\s*api\s*$", toc, re.M), "_toc.yml must list the API reference"


def test_there_is_a_public_api():
    assert len(API) > 5, API


@pytest.mark.parametrize("qualname,obj", API, ids=[q for q, _ in API])
def test_public_name_has_a_docstring(qualname, obj):
    assert is_documented(qualname, obj), (
        f"{qualname} has no docstring (constants: a `#:` comment above the assignment), "
        "so autodoc skips it"
    )

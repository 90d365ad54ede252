"""The API reference (api.md) documents every public name of selfattn.

Public names: everything in ``selfattn.__all__``, and everything in the ``__all__`` of
each public submodule (a module none of whose dotted parts starts with ``_``), except the
per-chapter helpers ``selfattn.exercises.chNN`` (checkers) and ``selfattn.widgets.chNN``
(explorers), which their chapters present and the package does not re-export. A name is
covered when api.md has an ``automodule`` with ``:members:`` that autodoc expands to it
(the module's ``__all__``, or an explicit member list), or an ``autoclass`` /
``autofunction`` / ``autodata`` for it; and it is documented when it has a docstring
(autodoc skips members without one) or, for a constant, a ``#:`` comment.
tests_site/test_api_page.py checks the same names on the built page.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from functools import lru_cache

import pytest
from book import ROOT

API_MD = ROOT / "api.md"
KINDS = "automodule|autoclass|autofunction|autodata|autoexception"
# reStructuredText (inside {eval-rst}) or MyST fences: `.. automodule:: x` or ```{automodule} x
DIRECTIVE = re.compile(rf"^(?:\.\. ({KINDS})::|(?:`{{3,}}|:{{3,}})\{{({KINDS})\}})\s*(\S+)\s*$")
OPTION = re.compile(r"^\s*:([\w-]+):\s*(.*)$")


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


def api_directives(text: str | None = None) -> list[tuple[str, str, dict[str, str]]]:
    """(directive, target, options) for each autodoc directive in api.md."""
    found, in_options = [], False
    for line in (text if text is not None else API_MD.read_text()).splitlines():
        if m := DIRECTIVE.match(line.strip()):
            found.append((m[1] or m[2], m[3], {}))
            in_options = True
        elif in_options and (o := OPTION.match(line)):
            found[-1][2][o[1]] = o[2].strip()
        else:
            in_options = False
    return found


def _data_comments(module: types.ModuleType) -> set[str]:
    """Module-level names with a ``#:`` doc comment (what autodoc documents for data)."""
    from sphinx.pycode import ModuleAnalyzer

    try:
        return {name for (_, name) in ModuleAnalyzer.for_module(module.__name__).find_attr_docs()}
    except Exception:  # noqa: BLE001 - no source: nothing documented
        return set()


def covered() -> tuple[dict[int, str], set[str]]:
    """Objects api.md documents (id -> where) and the modules it has an automodule for."""
    objects, modules = {}, set()
    for kind, target, options in api_directives():
        if kind == "automodule":
            mod = importlib.import_module(target)
            modules.add(target)
            if "members" not in options:
                continue
            listed = [n.strip() for n in options["members"].split(",") if n.strip()]
            if not listed:
                listed = list(
                    getattr(mod, "__all__", None)
                    or [
                        n
                        for n, v in vars(mod).items()
                        if not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__
                    ]
                )
            excluded = {n.strip() for n in options.get("exclude-members", "").split(",")}
            for name in listed:
                if hasattr(mod, name) and name not in excluded:
                    objects[id(getattr(mod, name))] = f"{target}.{name}"
        else:
            mod_name, _, name = target.rpartition(".")
            objects[id(getattr(importlib.import_module(mod_name), name))] = target
    return objects, modules


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


def test_api_md_names_only_real_modules():
    for kind, target, _ in api_directives():
        mod = target if kind == "automodule" else target.rpartition(".")[0]
        importlib.import_module(mod)  # raises, naming it, if api.md points nowhere


def test_there_is_a_public_api():
    assert len(API) > 5, API


@pytest.mark.parametrize("qualname,obj", API, ids=[q for q, _ in API])
def test_public_name_is_in_the_api_reference(qualname, obj):
    objects, modules = covered()
    if isinstance(obj, types.ModuleType):
        assert obj.__name__ in modules, (
            f"{qualname}: add `.. automodule:: {obj.__name__}` with `:members:` to api.md"
        )
        return
    home = getattr(obj, "__module__", None) or qualname.rpartition(".")[0]
    assert id(obj) in objects, (
        f"{qualname} is public but api.md does not document it: add `.. automodule:: {home}` with "
        f"`:members:` to api.md (autodoc follows the module's __all__)"
    )


@pytest.mark.parametrize("qualname,obj", API, ids=[q for q, _ in API])
def test_public_name_has_a_docstring(qualname, obj):
    assert is_documented(qualname, obj), (
        f"{qualname} has no docstring (constants: a `#:` comment above the assignment), "
        "so autodoc skips it"
    )


def test_directive_parser_reads_both_syntaxes_and_member_lists():
    text = (
        ".. automodule:: selfattn.attention\n"
        "   :members: softmax, scaled_dot_product_attention\n\n"
        "```{automodule} selfattn.masks\n:members:\n```\n:members: not an option of anything\n"
    )
    assert api_directives(text) == [
        ("automodule", "selfattn.attention", {"members": "softmax, scaled_dot_product_attention"}),
        ("automodule", "selfattn.masks", {"members": ""}),
    ]

"""One name per concept in the library (issue 53, point 3; the table in docs/design.md).

* validators are ``require_*`` (``selfattn._checks``); ``check_*`` means an exercise checker
  (``selfattn.exercises``) and nothing else;
* no alias wrappers (``check_causal``, ``check_alignment``, ``_checked_size``, ``_renamed``)
  and no former argument names (``n_heads``, ``n_layers``);
* the per-head width is ``d_head``, tiles are ``block_q``/``block_k``, the causal diagonal
  is ``offset``;
* "causal" is aligned bottom-right wherever it is spelled (``mask="causal"``,
  ``causal=True``, ``causal_mask(n, m)``): every ``alignment`` defaults to it.

The scan reads every function signature of ``lib/selfattn`` with ``ast``. Triton kernels
(``@jit``) keep their names: chapter 7 prints one's source in its recorded output.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import torch
from selfattn import _checks
from selfattn.attention import scaled_dot_product_attention
from selfattn.efficient.flash import flash_attention, flash_attention_reference
from selfattn.masks import causal_mask

LIB = Path(__file__).resolve().parents[1] / "lib" / "selfattn"

#: Parameter names that have a book name: banned synonym -> the name to use.
SYNONYMS = {
    "head_dim": "d_head",
    "n_heads": "num_heads",
    "n_layers": "num_layers",
    "n_kv_heads": "num_kv_heads",
    "diag": "offset",
    "block_m": "block_q",
    "block_n": "block_k",
    "q_block": "block_q",
    "k_block": "block_k",
    "tile_q": "block_q",
    "tile_k": "block_k",
}

#: ``check_*`` names outside the exercises that chapters call or print in recorded outputs
#: (renaming them would change a chapter's stored output).
CHAPTER_NAMES = {
    "efficient/_tiled.py:check_tiled",  # chapter 7 prints flash_attention_reference's source
    "distributed.py:check_worker",  # chapter 14 launches it: dist14.check_worker
    "i18n.py:check_line",  # an exercise checker's printed line (selfattn.exercises._core)
}

ALIASES = {"check_causal", "check_alignment", "check_mask_arg", "_checked_size", "_renamed"}


def _functions():
    for path in sorted(LIB.rglob("*.py")):
        rel = path.relative_to(LIB).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kernel = any("jit" in ast.unparse(d) for d in node.decorator_list)
                yield rel, node, kernel


def test_check_means_an_exercise_checker():
    found = {
        f"{rel}:{node.name}"
        for rel, node, _ in _functions()
        if node.name.startswith("check_") and not rel.startswith("exercises/")
    }
    assert found <= CHAPTER_NAMES, f"validators are require_*: rename {found - CHAPTER_NAMES}"


def test_checks_module_holds_only_generic_validators():
    names = {
        name
        for name, obj in vars(_checks).items()
        if inspect.isfunction(obj) and obj.__module__ == _checks.__name__
    }
    others = {n for n in names if not n.startswith("require_")}
    assert others <= {"describe", "is_half"}, others


def test_no_alias_wrappers():
    defined = {node.name for _, node, _ in _functions()}
    assert not defined & ALIASES, defined & ALIASES


def test_no_banned_synonyms_in_signatures():
    bad = []
    for rel, node, kernel in _functions():
        if kernel:
            continue
        args = node.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            if arg.arg in SYNONYMS:
                bad.append(f"{rel}:{node.name}({arg.arg} -> {SYNONYMS[arg.arg]})")
    assert not bad, bad


def test_every_alignment_default_is_bottom_right():
    """One meaning of "causal": every ``alignment`` parameter of the library defaults to
    ``"bottom_right"``, the alignment of ``mask="causal"``."""
    found, bad = 0, []
    for path, node, _ in _functions():
        args = node.args.args + node.args.kwonlyargs
        defaults = [None] * (len(node.args.args) - len(node.args.defaults))
        defaults += node.args.defaults + node.args.kw_defaults
        for arg, default in zip(args, defaults):
            if arg.arg == "alignment" and default is not None:  # a required one is told
                found += 1
                value = (
                    default.value if isinstance(default, ast.Constant) else ast.unparse(default)
                )
                if value != "bottom_right":
                    bad.append(f"{path}:{node.name} alignment={value!r}")
    assert found >= 8 and not bad, (found, bad)


def test_causal_spellings_agree_without_naming_the_alignment():
    """``mask="causal"``, ``causal=True`` and ``causal_mask(n, m)`` are one mask, aligned
    bottom-right (decoding against a cache), for n < m and n > m."""
    torch.manual_seed(0)
    for n, m in ((3, 7), (7, 3)):
        q, k, v = torch.randn(2, n, 8), torch.randn(2, m, 8), torch.randn(2, m, 8)
        by_mask = scaled_dot_product_attention(q, k, v, "causal")
        by_dense = scaled_dot_product_attention(q, k, v, causal_mask(n, m))
        torch.testing.assert_close(by_dense, by_mask)
        for kernel in (flash_attention, flash_attention_reference):
            by_flag = kernel(q, k, v, causal=True)
            torch.testing.assert_close(by_flag, by_mask, rtol=1e-5, atol=1e-6)
        top_left = flash_attention(q, k, v, causal=True, alignment="top_left")
        assert not torch.allclose(top_left, by_mask)  # the other alignment is named
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 8)
    by_mask = scaled_dot_product_attention(q, k, v, "causal")
    by_flash_kernel = scaled_dot_product_attention(q, k, v, "causal", kernel="flash")
    torch.testing.assert_close(by_flash_kernel, by_mask, rtol=1e-5, atol=1e-6)

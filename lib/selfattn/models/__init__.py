"""Tiny models trained on the book's pages, one module per family.

Each submodule defines ``__all__``; this package re-exports them so readers
write ``from selfattn.models import ...``.
"""
__all__: list[str] = []

"""Interactive explorers (ipywidgets), one module per chapter: ``selfattn.widgets.ch03`` and so on.

Every explorer has a static counterpart in its chapter, because the website cannot run Python.
"""

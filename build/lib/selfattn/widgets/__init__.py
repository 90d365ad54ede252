"""Interactive explorers (ipywidgets), one module per chapter: ``selfattn.widgets.ch03`` and so on.

Every explorer is built by :func:`grid_explorer`: its views are drawn in advance over a grid
of control values and its controls select them with links that run in the browser, so the
explorers also work on the static website, where no Python runs.
"""

from ._explorer import Control, figure_png, grid_explorer, view_values, visible_view

__all__ = ["Control", "grid_explorer", "figure_png", "view_values", "visible_view"]

"""The chapters' recorded figures, shipped in the library as selfattn.recorded.

This folder is package data (see pyproject.toml): selfattn.load_recorded and
selfattn.load_results read it when a chapter runs from an installed wheel.
"""

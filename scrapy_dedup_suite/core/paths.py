"""A class's dotted path as a project writes it in its settings.

The package's public classes live in the folder of their layer and are re-exported at
the paths projects have always written (``scrapy_dedup_suite.dupefilter.RFPDupeFilter``
...). Each declares that path as ``public_path``; a message that names the class, or
the advice it gives, uses it (a subclass of one, declaring none, is named where it is)."""

from __future__ import annotations

from typing import Any


def dotted_path(obj: Any) -> str:
    """``obj``'s path if a class (its ``public_path`` if it declares one itself), the
    string itself if one, else its repr."""
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, type):
        return repr(obj)
    public = obj.__dict__.get("public_path")
    return public if isinstance(public, str) else f"{obj.__module__}.{obj.__qualname__}"

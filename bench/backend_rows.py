"""A bench row's backend as the benches name it: a ``DEDUP_BACKEND``, or
``compact+growing`` / ``hash+growing``: that backend with nothing to size (its buckets
split as it grows: ``DEDUP_COMPACT_CAPACITY = 0``)."""

from __future__ import annotations

from typing import Any


def our_backend(name: str) -> dict[str, Any]:
    """The settings that choose the backend of row ``name``."""
    backend, plus, layout = name.partition("+")
    if plus and layout != "growing":
        raise ValueError(f"{name!r}: a backend, or one followed by +growing")
    return {"DEDUP_BACKEND": backend, **({"DEDUP_COMPACT_CAPACITY": 0} if plus else {})}

"""What the modules of functions of a filter read of it, as ``Protocol``\\ s.

:mod:`.admission`, :mod:`.clearing`, :mod:`.meta` and :mod:`.calls` work on a
:class:`~.stored.StoredFilter` or a :class:`~.base.DedupBackend`, which call them: each
names what it reads by one of these views instead of importing the class back (no
circle of imports, even of type hints; ``tests/test_layers.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class FilterView(Protocol):
    """A filter by its name, its base key and its client."""

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def server(self) -> Any: ...


class TypedView(FilterView, Protocol):
    """A filter that knows the types its keys must hold, and checks them."""

    def expected_types(self) -> dict[str, str]: ...

    def check_types(self, expected: Mapping[str, str], hint: str = "") -> dict[str, str]: ...

    def wrong_type_hint(self, found: str) -> str: ...

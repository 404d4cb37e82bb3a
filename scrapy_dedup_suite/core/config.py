"""The checks behind every setting: each turns a value into its type or raises a
:class:`DedupConfigError` that names the setting and the values allowed.

:mod:`..settings.table` gives each setting its check with its limits; options and
constructors (values given by hand) go through it, so a backend built without a
crawler gets the same clear errors.
"""

from __future__ import annotations

import math
from typing import Any

from scrapy.settings import BaseSettings

from ..exceptions import DedupConfigError

_MISSING = object()


def _raw(settings: BaseSettings | dict[str, Any], name: str) -> Any:
    value = settings.get(name)
    return _MISSING if value is None else value


def check_bool(name: str, value: Any) -> bool:
    """``value`` as a bool: True/False, 1/0, or "true"/"false"/"1"/"0" as ``-s`` passes them."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise DedupConfigError(f"{name} must be True or False, got {value!r}")


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    allowed: str = "",
) -> int:
    """Return ``value`` as an int from ``minimum`` to ``maximum`` or raise a
    DedupConfigError naming ``name`` and what is ``allowed``."""
    if isinstance(value, bool):
        ok = False
    elif isinstance(value, int):
        ok = True
    elif isinstance(value, float) and value.is_integer():
        value, ok = int(value), True
    elif isinstance(value, str):
        text = value.strip().replace("_", "")
        try:
            value, ok = int(text), True
        except ValueError:
            # From the command line every setting is a string: "1e6" is a whole number.
            try:
                number = float(text)
            except ValueError:
                ok = False
            else:
                ok = number.is_integer()
                if ok:
                    value = int(number)
    else:
        ok = False
    if (
        not ok
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        what = allowed or (
            f"a whole number >= {minimum}" if minimum is not None else "a whole number"
        )
        got = f"{value:,}" if ok else repr(value)
        raise DedupConfigError(f"{name} must be {what}, got {got}")
    return int(value)


def check_float(
    name: str, value: Any, *, low: float, high: float, low_open: bool, high_open: bool, allowed: str
) -> float:
    """Return ``value`` as a float in the interval or raise a DedupConfigError."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise DedupConfigError(f"{name} must be {allowed}, got {value!r}") from None
    if math.isnan(number) or math.isinf(number):
        raise DedupConfigError(f"{name} must be {allowed}, got {value!r}")
    if number < low or (low_open and number == low):
        raise DedupConfigError(f"{name} must be {allowed}, got {value!r}")
    if number > high or (high_open and number == high):
        bound = "below" if high_open else "at most"
        raise DedupConfigError(f"{name} must be {allowed}, {bound} {high:,.10g}, got {value!r}")
    return number


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise DedupConfigError(f"{name} must be one of {listed}, got {value!r}")
    return str(value)


def has(settings: BaseSettings | dict[str, Any], name: str) -> bool:
    return _raw(settings, name) is not _MISSING


def human_bytes(n: float) -> str:
    """A size in the unit that suits it (B, KiB, MiB, GiB, TiB), one decimal:
    every report of this package writes memory the same way."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:,.0f} B" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"

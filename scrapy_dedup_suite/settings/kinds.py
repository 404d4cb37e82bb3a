"""What a setting accepts (the kinds of values), and a row of the settings table
(:class:`Setting`): the table itself is :mod:`.table`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scrapy.settings import BaseSettings

from ..core import config
from ..exceptions import DedupConfigError

# --- what a setting accepts ---------------------------------------------------


HUNDRED_YEARS = 100 * 365 * 86400.0
TEN_YEARS = 10 * 365 * 86400.0


@dataclass(frozen=True)
class Whole:
    """A whole number from ``minimum`` to ``maximum`` ("1e6" from ``-s`` is one)."""

    minimum: int
    maximum: int | None = None
    allowed: str = ""

    def __call__(self, name: str, value: Any) -> int:
        return config.check_int(
            name, value, minimum=self.minimum, maximum=self.maximum, allowed=self.allowed
        )


@dataclass(frozen=True)
class WholeOrZero(Whole):
    """0 (a meaning of its own), or a whole number from ``minimum`` to ``maximum``."""

    def __call__(self, name: str, value: Any) -> int:
        number = config.check_int(
            name, value, minimum=0, maximum=self.maximum, allowed=self.allowed
        )
        return number if number == 0 else super().__call__(name, number)


@dataclass(frozen=True)
class WholeOrAuto(Whole):
    """None / "auto" (the package decides), or a whole number from ``minimum`` to
    ``maximum``."""

    def __call__(self, name: str, value: Any) -> int | None:  # type: ignore[override]
        if value is None or (
            isinstance(value, str) and value.strip().lower() in ("", "auto", "none")
        ):
            return None
        return super().__call__(name, value)


@dataclass(frozen=True)
class Seconds:
    """A number in an interval (open or closed at each end)."""

    low: float
    high: float
    allowed: str
    low_open: bool = True
    high_open: bool = False

    def __call__(self, name: str, value: Any) -> float:
        return config.check_float(
            name,
            value,
            low=self.low,
            high=self.high,
            low_open=self.low_open,
            high_open=self.high_open,
            allowed=self.allowed,
        )


@dataclass(frozen=True)
class Flag:
    """True or False (also "true"/"false"/"1"/"0" as ``-s`` passes them)."""

    def __call__(self, name: str, value: Any) -> bool:
        return config.check_bool(name, value)


@dataclass(frozen=True)
class FlagOrAuto:
    """True, False, or None / "auto" (let the package decide)."""

    def __call__(self, name: str, value: Any) -> bool | None:
        if value is None or (
            isinstance(value, str) and value.strip().lower() in ("", "auto", "none")
        ):
            return None
        return config.check_bool(name, value)


@dataclass(frozen=True)
class OneOf:
    choices: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> str:
        return config.check_choice(name, value, self.choices)


@dataclass(frozen=True)
class Text:
    """A string (an empty one if ``empty``); ``example`` is shown when the value is not one."""

    example: str
    empty: bool = False

    def __call__(self, name: str, value: Any) -> str:
        if not isinstance(value, str) or not (self.empty or value.strip()):
            raise DedupConfigError(f"{name} must be {self.example}, got {value!r}")
        return value


@dataclass(frozen=True)
class Url:
    """A server's URL, or unset (None)."""

    def __call__(self, name: str, value: Any) -> str | None:
        if value is not None and not isinstance(value, str):
            raise DedupConfigError(
                f"{name} must be a string such as 'redis://127.0.0.1:6379/0', got {value!r}"
            )
        return value


@dataclass(frozen=True)
class Params:
    """redis-py arguments: a dict (Scrapy's settings give one as a BaseSettings; ``-s``
    a JSON object, which Scrapy's ``getdict`` and scrapy-redis read too); unset, an
    empty one. ``what``: whose connections they are for, in the error, which never
    shows the value: it may hold a password."""

    what: str

    def __call__(self, name: str, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise DedupConfigError(
                    f"{name} must be a dict of redis-py {self.what}; given as text it must be "
                    f"a JSON object, such as -s '{name}={{\"socket_timeout\": 5}}'"
                ) from None
        if not isinstance(value, (dict, BaseSettings)):
            raise DedupConfigError(
                f"{name} must be a dict of redis-py {self.what}, got a {type(value).__name__}"
            )
        return dict(value)


@dataclass(frozen=True)
class HttpCodes:
    """A list of HTTP status codes (``-s`` gives "500,503"), or unset (None)."""

    def __call__(self, name: str, value: Any) -> list[int] | None:
        if value is None:
            return None
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, int) and not isinstance(items, bool):
            items = [items]
        allowed = "a list of HTTP status codes from 100 to 599, e.g. [500, 502, 503]"
        if not isinstance(items, (list, tuple, set, frozenset)):
            raise DedupConfigError(f"{name} must be {allowed}, got {value!r}")
        return [
            config.check_int(name, item, minimum=100, maximum=599, allowed=allowed)
            for item in items
        ]


@dataclass(frozen=True)
class Ports:
    """A TCP port, or a range to try in turn as ``[low, high]`` (as Scrapy's
    TELNETCONSOLE_PORT; ``-s`` gives "9410" or "9410,9420"), or unset (None)."""

    def __call__(self, name: str, value: Any) -> tuple[int, int] | None:
        if value is None:
            return None
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            items = [items]
        allowed = "a port from 0 to 65535 (0: any free one) or a range such as [9410, 9420]"
        if len(items) not in (1, 2):
            raise DedupConfigError(f"{name} must be {allowed}, got {value!r}")
        ports = [
            config.check_int(name, p, minimum=0, maximum=65535, allowed=allowed) for p in items
        ]
        low, high = ports[0], ports[-1]
        if high < low:
            raise DedupConfigError(f"{name} must be {allowed}, got {value!r} (high below low)")
        return low, high


@dataclass(frozen=True)
class Checked:
    """Passed on as given: the component it configures checks it with the settings
    it depends on (a window and its time zone, sentinels and their URL...), naming it."""

    where: str

    def __call__(self, name: str, value: Any) -> Any:
        return value


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    accepts: Callable[[str, Any], Any]
    help: str
    #: The default as the docs show it, when ``repr(default)`` is not how to say it
    #: (``{default_keys}``: each backend's default key, filled in by settings_docs).
    shown: str = ""
    #: "main", "janitor" or "frontier": which of the documentation's tables lists it.
    table: str = "main"
    #: "scrapy" or "scrapy-redis" for their settings, read as they read them.
    owner: str = ""

    def check(self, value: Any) -> Any:
        return self.accepts(self.name, value)

    def read(self, settings: BaseSettings | dict[str, Any]) -> Any:
        found = settings.get(self.name)
        return self.check(self.default if found is None else found)

    def default_text(self) -> str:
        if self.shown:
            return self.shown
        if self.owner:
            return f"as {self.owner}"
        if self.default is None:
            return "unset"
        if isinstance(self.default, str):
            return f'`"{self.default}"`'
        return f"`{self.default!r}`"

"""What the package's add scripts answer for each fingerprint, named once for Lua and
Python.

An add script answers per fingerprint: a positive number when it was seen (which
block or layer held it), 0 when it was new and written, and, from a scalable filter:

- :data:`GREW` (-1): new and written, after the filter added a layer;
- :data:`FULL` (-2): new and written into the last layer the filter may have, full;
- below :data:`MORE` (-10): nothing written: the call needs the schedule of
  ``MORE - answer`` layers, and the client sends it again with them.

So "new" is ``MORE <= answer <= 0``. :func:`lua` gives these names to every script
(``scripts.LuaScript`` puts its line first), so neither side writes a bare number.
"""

from __future__ import annotations

GREW = -1
FULL = -2
MORE = -10


def sent_again(answer: int) -> bool:
    """Whether ``answer`` says nothing was written: send the call again, with more."""
    return answer < MORE


def layers_needed(answer: int) -> int:
    """The layers whose schedule a :func:`sent_again` answer asks for."""
    return MORE - answer


def lua() -> str:
    """The names for Lua: one line, the first of every script."""
    return f"local ANSWER_GREW, ANSWER_FULL, ANSWER_MORE = {GREW}, {FULL}, {MORE}"

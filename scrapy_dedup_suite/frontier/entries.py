"""The frontier's entries as its keys hold them, read back in Python as the scripts
read them: a priority, a "priority entry" member, a run of the queue (``lua/frontier_runs.lua``),
and an entry without the count of its returns or its download slot's tag. Anything else
reads as None: data from Redis is parsed, never trusted."""

from __future__ import annotations

import re

#: A priority as the frontier writes it (``frontier_priority`` in ``lua/frontier_runs.lua``).
_PRIORITY = re.compile(rb"-?[0-9]{1,15}")
#: The highest priority the frontier stores (and minus it, the lowest): a request's
#: beyond is stored at the bound.
PRIORITY_BOUND = 10**15 - 1


def stored_priority(priority: int) -> int:
    """``priority`` as the frontier stores it: a whole number within PRIORITY_BOUND."""
    return max(-PRIORITY_BOUND, min(PRIORITY_BOUND, int(priority)))


def whole_priority(text: bytes | str) -> int | None:
    """``text`` read back as a priority (a whole number), or None for anything else."""
    raw = text.encode() if isinstance(text, str) else bytes(text)
    return int(raw) if len(raw) <= 16 and _PRIORITY.fullmatch(raw) else None


def parse_member(member: bytes) -> tuple[int, bytes] | None:
    """A "priority entry" member read back from the frontier's keys, or None for
    anything else (``frontier_parse`` in ``lua/frontier.lua``)."""
    text, space, entry = bytes(member).partition(b" ")
    priority = whole_priority(text)
    return None if not space or priority is None else (priority, entry)


#: A run's head after its place (6 bytes): how many requests (a byte), the last one's
#: priority and ';'; then per request its priority and ',', its entry's length (a byte,
#: 1 to 249; else the byte 0, the length in digits and ':'), then the entry.
_HEAD = re.compile(rb"(.)(-?[0-9]{1,15});", re.DOTALL)
_PRIORITY_OF = re.compile(rb"(-?[0-9]{1,15}),")
_LONG = re.compile(rb"([0-9]{1,9}):")


def parse_run(member: bytes) -> list[tuple[int, bytes]] | None:
    """A member of the queue read back: its requests (priority, entry), or None for
    anything that is not a run (``frontier_read`` in ``lua/frontier_runs.lua``)."""
    member = bytes(member)
    head = _HEAD.match(member, 6)
    if len(member) < 12 or head is None:
        return None
    records, at = [], head.end()
    while at < len(member):
        found = _PRIORITY_OF.match(member, at)
        if found is None or found.end() >= len(member):
            return None
        size, start = member[found.end()], found.end() + 1
        if size == 0:
            long = _LONG.match(member, start)
            if long is None:
                return None
            size, start = int(long.group(1)), long.end()
        at = start + size
        if at > len(member):
            return None
        records.append((int(found.group(1)), member[start:at]))
    return records if len(records) == head.group(1)[0] else None


def entry_of(item: bytes) -> bytes:
    """A list item's entry, without the count of the times it came back from a dead
    worker (``frontier_wrap`` in ``lua/frontier.lua``) or its download slot's tag
    (``frontier_slot_split`` in ``lua/frontier_slots.lua``)."""
    item = bytes(item)
    item = item[2:] if len(item) >= 2 and item[0] == 3 else item
    return untagged(item)


def untagged(entry: bytes) -> bytes:
    """``entry`` without its download slot's tag, if it has one."""
    if len(entry) >= 2 and entry[0] == 5 and len(entry) >= 2 + entry[1]:
        return entry[2 + entry[1] :]
    return entry

"""The frontier's queue drawn for a terminal (``scrapy dedup-info --watch``): the
requests waiting and leased over the last rounds as sparklines with their rate, a bar
per shard, and the workers with their leases and when each was last seen.

Plain text and Unicode blocks, no dependency: it reads in any terminal, a log or a CI
page as well as in a live one.
"""

from __future__ import annotations

from collections import deque
from typing import Any

#: Eight heights of a sparkline's column, lowest first.
SPARKS = "▁▂▃▄▅▆▇█"
#: Rounds a sparkline shows, and the most shards and workers drawn (the busiest).
ROUNDS, MOST = 40, 12


def sparkline(values: list[int]) -> str:
    """``values`` as columns of eight heights, from 0 to the largest."""
    top = max(values, default=0)
    if not top:
        return SPARKS[0] * len(values)
    return "".join(SPARKS[min(7, int(v * 8 / top))] if v else " " for v in values)


def bar(value: int, top: int, width: int = 24) -> str:
    """``value`` as a bar of ``width`` cells, full at ``top``."""
    filled = round(width * value / top) if top else 0
    return "█" * filled + "·" * (width - filled)


class History:
    """What the rounds saw: (time, waiting, leased), the last ROUNDS."""

    def __init__(self) -> None:
        self.rounds: deque[tuple[float, int, int]] = deque(maxlen=ROUNDS)

    def add(self, when: float, view: dict[str, Any]) -> None:
        self.rounds.append((when, int(view["waiting"]), int(view["leased"])))

    def rate(self, column: int) -> str:
        """How fast ``column`` (1: waiting, 2: leased) changed over the rounds shown."""
        if len(self.rounds) < 2:
            return ""
        first, last = self.rounds[0], self.rounds[-1]
        if last[0] <= first[0]:
            return ""
        per_second = (last[column] - first[column]) / (last[0] - first[0])
        return f" ({per_second:+,.1f}/s)"


def picture(view: dict[str, Any], history: History) -> list[str]:
    """The lines of the drawing for ``view`` (``dedup-info``'s frontier part, with
    ``per_shard`` and ``workers_seen``) after ``history`` saw it."""
    lines = [f"{view['status']}: {view['status_detail']}"]
    for column, name in ((1, "waiting"), (2, "leased")):
        values = [int(r[column]) for r in history.rounds]
        now = values[-1] if values else view[name]
        lines.append(f"{name:<8} {sparkline(values):<{ROUNDS}} {now:>12,}{history.rate(column)}")
    shards = sorted(view["per_shard"], key=lambda s: (-s["waiting"], s["queue"]))
    if len(shards) > 1 or (shards and shards[0]["waiting"] + shards[0]["held"]):
        top = max(s["waiting"] + s["held"] for s in shards) or 1
        lines.append("shards (█ waiting and leased, to the fullest):")
        for s in shards[:MOST]:
            lines.append(
                f"  {s['queue'][:32]:<32} {bar(s['waiting'] + s['held'], top)} "
                f"{s['waiting']:>10,} waiting {s['held']:>7,} leased"
            )
        if len(shards) > MOST:
            lines.append(f"  ... and {len(shards) - MOST:,} more shard(s)")
    seen, held = view["workers_seen"], view["leased_by"]
    workers = sorted(set(seen) | set(held), key=lambda w: (seen.get(w, float("inf")), w))
    if workers:
        lines.append("workers (leases held, last call):")
        for worker in workers[:MOST]:
            ago = seen.get(worker)
            when = f"{ago:,.0f} s ago" if ago is not None else "not seen for an hour"
            lines.append(f"  {worker[:40]:<40} {held.get(worker, 0):>7,} leases  {when}")
        if len(workers) > MOST:
            lines.append(f"  ... and {len(workers) - MOST:,} more worker(s)")
    return lines

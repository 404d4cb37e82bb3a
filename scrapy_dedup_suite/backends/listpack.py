"""What the server keeps in its compact hash encoding (listpack), read once an open by
the bucket layouts (``compact``, ``hash``), sized or growing."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from ..server.cluster import masters
from .keys import as_str

#: What is assumed when the server will not say (CONFIG refused): managed servers keep
#: the default, but a lower assumption costs little (more, smaller buckets).
UNKNOWN_LISTPACK_ENTRIES = 128
#: Redis memory a fingerprint takes in listpack buckets with an empty value, measured
#: (``python -m bench.compact_layouts``: 12.3-13.3 B on Redis 7.0-8.2 and Valkey 8-9),
#: for estimates made before any is written (a migration's plan).
BYTES_PER_FINGERPRINT = 13.5


def listpack_limits(server: Any) -> tuple[int, int] | None:
    """The lowest ``hash-max-listpack-entries`` and ``-value`` over the masters
    (``hash-max-ziplist-*`` on Redis 6), or None when CONFIG is refused."""
    entries: list[int] = []
    value: list[int] = []
    try:
        for client in masters(server):
            found = {as_str(k): as_str(v) for k, v in client.config_get("hash-max-*").items()}
            for kind, out in (("entries", entries), ("value", value)):
                # hash-max-ziplist-* on Redis 6
                said = found.get(f"hash-max-listpack-{kind}", found.get(f"hash-max-ziplist-{kind}"))
                out.append(int(said or ""))
    except (ResponseError, ValueError):  # CONFIG refused or renamed
        return None
    return (min(entries), min(value)) if entries else None

"""The key schema: where a filter's parts live in Redis, beside its base key, and the
type each must hold. Every module builds key names here."""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from redis.crc import key_slot

from ..exceptions import DedupConfigError, WrongKeyTypeError
from ..server.cluster import masters

#: Fingerprints sent to Redis per pipeline in the batched operations.
BATCH = 1000

T = TypeVar("T")


#: The suffix of a parameter record and of a stamp beside data.
META = ":meta"


def meta_key(key: str) -> str:
    """A filter's parameter record (a hash), or the stamp beside data at ``key``."""
    return f"{key}{META}"


#: The suffix of a scalable Bloom filter's layer record.
LAYERS = ":layers"


def layers_key(base: str) -> str:
    """A scalable Bloom filter's layer record (a hash: n, count) beside its first layer."""
    return f"{base}{LAYERS}"


def block_prefix(key: str, block: int) -> str:
    """Hash-tagged name shared by everything stored for one Bloom block (its slot)."""
    return f"{{{key}:{block}}}"


def block_re(key: str, rest: str = r"\}") -> re.Pattern[str]:
    """What matches the keys of the blocks of the filter at ``key``, the block's number
    as group 1 (``rest``: the pattern after the number; by default the closing tag)."""
    return re.compile("^" + re.escape("{" + key + ":") + r"([0-9]+)" + rest)


def time_bucket_key(prefix: str, label: str) -> str:
    """A windowed filter's bucket of a block: the block's prefix and the bucket's start."""
    return f"{prefix}:{label}"


def bucket_prefix(group_key: str) -> str:
    """The start of the names of a group's buckets (compact, hash): in the group's slot,
    so that a bucket's key is this and its number."""
    return slot_sibling(group_key, ":")[:-1] + ":"


#: The suffix of a growing group's level record (a string, ``lua/grow.lua``), and the
#: start of its buckets' names after it.
GROW = ":grow"


def grow_keys(group_key: str) -> tuple[str, str]:
    """A growing group's level record and the prefix of its buckets' keys (a bucket:
    the prefix and its number), in the group's slot."""
    record = slot_sibling(group_key, GROW)
    return record, f"{record}:"


#: The suffix of the key that probes whether a server expires hash fields.
TTL_PROBE = ":ttl-probe"


def shard_key(key: str, group: int) -> str:
    """A hash shard of the layout-1 hash filter, or the base of a bucket group."""
    return f"{key}:{group}"


def layer_key(base: str, j: int) -> str:
    """Layer ``j`` of a scalable Bloom filter, from 0: the first is ``base`` itself,
    then ``base:L1``, ``base:L2``..."""
    return base if j == 0 else f"{base}:L{j}"


def migrating_key(prefix: str) -> str:
    """The bitmap a migration uploads beside a Bloom block before ORing it in."""
    return f"{prefix}:migrating"


def failed_key(key: str) -> str:
    """The pages that failed for good, recorded beside the filter at ``key`` (a hash:
    fingerprint -> URL) until they are forgotten."""
    return f"{key}:failed"


def janitor_state_key(key: str) -> str:
    """Where the janitor keeps its progress for the filter at ``key``."""
    return f"{key}:janitor"


def janitor_lock_key(key: str) -> str:
    """The lock that lets one janitor pass run at a time on ``key``."""
    return f"{key}:janitor:lock"


def as_str(value: Any) -> str:
    """Redis replies are bytes unless the client decodes them."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def read_hash(server: Any, key: str) -> dict[str, str]:
    """A hash's fields and values as text: a parameter record, a run's saved state
    (empty if there is none). The one place a stored record is decoded."""
    return {as_str(k): as_str(v) for k, v in server.hgetall(key).items()}


def chunks(items: Iterable[T], size: int = BATCH) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def keys_held(server: Any) -> int:
    """How many keys the server holds (DBSIZE, added up over a cluster's masters)."""
    return sum(int(client.dbsize()) for client in masters(server))


def prefix_pattern(prefix: str) -> str:
    """The SCAN MATCH pattern of the keys that start with ``prefix`` (its glob
    characters escaped)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"


def scan_keys(server: Any, prefix: str) -> Iterator[str]:
    """Every key that starts with ``prefix`` (SCAN on each master): what exists, for a
    layout with too many possible keys to name."""
    pattern = prefix_pattern(prefix)
    for client in masters(server):
        for key in client.scan_iter(match=pattern, count=BATCH):
            yield as_str(key)


def migration_state_key(key: str) -> str:
    """Where ``scrapy migrate-set-to-bloom`` keeps its progress for the filter at ``key``."""
    return f"{key}:migration"


def slot_of(key: str) -> int:
    return key_slot(key.encode("utf-8"))


def slot_sibling(key: str, suffix: str) -> str:
    """A key in the same cluster slot as ``key``: ``key + suffix`` when ``key`` has a
    hash tag, else ``{key}`` + suffix."""
    sibling = key + suffix
    if slot_of(sibling) != slot_of(key):
        sibling = "{" + key + "}" + suffix
    if slot_of(sibling) != slot_of(key):
        raise DedupConfigError(
            f"The Redis key {key!r} cannot have a companion key in its cluster slot; avoid "
            "'{' and '}' in SCHEDULER_DUPEFILTER_KEY other than one hash tag such as '{spider}'"
        )
    return sibling


#: The type of the server's own Bloom filters as TYPE names it: RedisBloom (Redis 8,
#: Redis Stack) and valkey-bloom. An expected type may list alternatives with '|'.
NATIVE_BLOOM_TYPE = "MBbloom--|bloomfltr"
#: How an expected type reads in messages.
TYPE_NAMES = {NATIVE_BLOOM_TYPE: "Bloom filter (BF.*)"}


def type_ok(found: str, expected: str) -> bool:
    """Whether TYPE's answer ``found`` is ``expected`` (one of its '|' alternatives) or none."""
    return found == "none" or found in expected.split("|")


def check_types(
    server: Any, expected: Mapping[str, str], hint_for: Callable[[str], str]
) -> dict[str, str]:
    """Raise WrongKeyTypeError unless each key is missing or of its type (``hint_for``:
    the advice for a key found holding a type). Returns the type found for each key
    ("none" when missing)."""
    if not expected:
        return {}
    pipe = server.pipeline(transaction=False)
    for key in expected:
        pipe.type(key)
    found = {key: as_str(kind) for key, kind in zip(expected, pipe.execute())}
    for key, kind in found.items():
        if not type_ok(kind, expected[key]):
            raise WrongKeyTypeError(
                key, kind, expected[key], hint_for(kind), TYPE_NAMES.get(expected[key], "")
            )
    return found


def memory_usage(server: Any, keys: Sequence[str | bytes]) -> int:
    """Sum of ``MEMORY USAGE`` over ``keys`` (missing keys count 0)."""
    if not keys:
        return 0
    pipe = server.pipeline(transaction=False)
    for key in keys:
        pipe.execute_command("MEMORY USAGE", key, "SAMPLES", "0")
    return sum(int(v or 0) for v in pipe.execute())


def wrong_type_hint(found: str, convertible: bool) -> str:
    """What to do about a filter's key that holds a ``found``; ``convertible``: the
    filter could be made from a scrapy-redis set (a Bloom filter)."""
    if found == "set" and convertible:
        return (
            "It looks like a scrapy-redis fingerprint set: convert it with "
            "`scrapy migrate-set-to-bloom`, or set SCHEDULER_DUPEFILTER_KEY to another key."
        )
    return (
        "Point the dupefilter at another key (SCHEDULER_DUPEFILTER_KEY), or move or delete "
        "that key yourself if it is not needed."
    )


def spread(fingerprint: str, parts: int) -> int:
    """Which of ``parts`` keys (a hash filter's shards, a server Bloom filter's
    blocks) holds ``fingerprint``: CRC32 of the string, so any fingerprint spreads
    evenly. (The Lua Bloom filters choose a block from the digest itself, in their
    scripts and in ``BloomParams.block_of``: their fingerprints are hex digests.)
    Fixed for a stored filter: changing it would lose what each key holds."""
    return 0 if parts == 1 else zlib.crc32(fingerprint.encode("utf-8")) % parts


def spider_key(template: str, spider_name: str, setting: str) -> str:
    """``template`` (``setting``'s key template, ``%(spider)s`` its one placeholder)
    for ``spider_name``. A name with a brace is refused where it goes in a key: there it
    makes (or breaks) a Cluster hash tag, and the frontier's queue and a sharded
    filter's keys are named from a key's tag, so spiders 'a{x}' and 'b{x}' would share
    them. A colon or a space is kept: no key of this package is named by splitting one."""
    if "%(spider)s" in template and ("{" in spider_name or "}" in spider_name):
        raise DedupConfigError(
            f"The spider name {spider_name!r} has a brace, which in the Redis keys {setting} "
            f"names ({template!r}) would make a Cluster hash tag that other spiders may "
            f"share: rename the spider without braces, or set {setting} to a key without "
            "%(spider)s"
        )
    return template % {"spider": spider_name}


def hash_tag(key: str) -> str:
    """What decides ``key``'s cluster slot: its hash tag (``{...}``, not empty), else
    the whole key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def frontier_key(anchor: str) -> str:
    """The frontier's queue shard in ``anchor``'s slot (a sorted set of runs of
    requests; beside it ``:leases``, ``:expiries``, ``:counters``, ``:aside``,
    ``:later`` and ``:bad``)."""
    return "{" + hash_tag(anchor) + "}:frontier"


def spider_key_patterns(spider: str) -> tuple[str, str]:
    """The ACL key patterns of a spider's keys under the default key templates
    (``%(spider)s:...``, and the Cluster hash tags ``{%(spider)s:...}``)."""
    return (f"{spider}:*", "{" + spider + ":*")

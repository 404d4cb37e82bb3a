"""Where a fingerprint lives is part of what is stored: a filter written by one
release is read by the next. These pin it, so that a change of layout fails here
first (it would need a new LAYOUT_VERSION, and to keep reading the old one). No Redis."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from scrapy_dedup_suite.backends.keys import spread
from scrapy_dedup_suite.core.bloom_math import BloomParams

FINGERPRINTS = [hashlib.sha1(str(i).encode()).hexdigest() for i in range(5)]


def test_hash_shards_and_server_bloom_blocks_are_crc32_of_the_fingerprint():
    assert [spread(fp, 16) for fp in FINGERPRINTS] == [0, 5, 9, 9, 12]
    assert [spread(fp, 7) for fp in FINGERPRINTS] == [0, 6, 4, 2, 6]
    assert spread("https://x/", 5) == 1  # any string, not only digests
    assert all(spread(fp, 1) == 0 for fp in FINGERPRINTS)


def test_lua_bloom_blocks_are_digits_24_to_32_of_the_digest():
    params = BloomParams.from_capacity(10_000_000, 0.001, blocks=16)
    assert [params.block_of(fp) for fp in FINGERPRINTS] == [9, 6, 8, 7, 12]
    assert all(params.block_of(fp) == int(fp[24:32], 16) % 16 for fp in FINGERPRINTS)


def test_compact_buckets_and_fields_come_from_the_sha1_of_the_fingerprint():
    from scrapy_dedup_suite.backends.compact import CompactBackend

    backend = CompactBackend(None, "k", capacity=10_000_000, shards=16, buckets=39_063)
    located = [backend.locate(fp) for fp in FINGERPRINTS]
    assert [bucket for bucket, _ in located] == [3599, 24219, 36561, 34912, 35393]
    assert [field.hex() for _, field in located] == [
        "1955d5f7a2b9dd6c",
        "3ac1445a500251fc",
        "2581d785ba910fbf",
        "456b52abe1182f5a",
        "e02f6d92150e84bf",
    ]
    for fp, (bucket, field) in zip(FINGERPRINTS, located):
        digest = hashlib.sha1(fp.encode()).digest()
        assert bucket == int.from_bytes(digest[:4], "big") % 39_063 and field == digest[4:12]
    # Bucket b is in group b % shards, hash-tagged with it; the group's stamp beside it.
    assert backend.bucket_key(3599) == "{k:15}:3599"
    assert backend.stamp_keys[15] == "{k:15}:meta"
    assert backend.locate("https://x/")[0] == backend.locate("https://x/")[0]  # any string


def lines_outside_keys_py(pattern: str) -> list[str]:
    """Each line of the package, keys.py aside, that ``pattern`` finds."""
    package = Path(__file__).resolve().parent.parent / "scrapy_dedup_suite"
    found = re.compile(pattern)
    return [
        f"{path.relative_to(package)}:{n}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "keys.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if found.search(line)
    ]


def test_key_names_are_built_in_keys_py_only():
    """keys.py is the one place a Redis key's name is made: no other module of the
    package joins a filter's key with a tag or a suffix itself."""
    assert not lines_outside_keys_py(r"""f"\{(?:self\.)?key\}:|f"\{\{\{|"\{" \+ |:L\{""")


def test_a_stored_record_is_read_in_keys_py_only():
    """A parameter record or a saved state is read and decoded by keys.read_hash alone."""
    assert not lines_outside_keys_py(r"\bhgetall\(")

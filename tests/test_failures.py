"""A failure is told by its error code, never by its words (failures.py), and the Lua
scripts are built from one prelude and the fragments each names (scripts.py)."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from scrapy_dedup_suite.backends import HashBackend
from scrapy_dedup_suite.exceptions import (
    DedupBackendError,
    InvalidFingerprintError,
    WrongKeyTypeError,
)
from scrapy_dedup_suite.server import scripts
from scrapy_dedup_suite.server.failures import (
    SCRIPT_CODES,
    code_of,
    is_transient,
    script_failure,
    translate,
)

LUA = resources.files("scrapy_dedup_suite.server").joinpath("lua")
NAMES = sorted(p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua"))
DEFINED = re.compile(r"local function (dedup_\w+)")
CALLED = re.compile(r"\b(dedup_\w+)\(")


def own_source(name: str) -> str:
    return LUA.joinpath(f"{name}.lua").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", NAMES)
def test_every_script_has_what_it_calls_from_the_fragments_it_names(name):
    order = scripts.includes(name)
    if name != "prelude":
        assert order[0] == "prelude"
    defined = {f for part in [*order, name] for f in DEFINED.findall(own_source(part))}
    called = set(CALLED.findall(own_source(name)))
    assert called - defined == set()
    # Each helper is defined once, in one fragment: none is written twice; but
    # dedup_add, the function every add step declares (scripts.AddStep), once each.
    everywhere = [f for part in NAMES for f in DEFINED.findall(own_source(part))]
    helpers = [f for f in everywhere if f != "dedup_add"]
    assert len(helpers) == len(set(helpers))
    steps = [part for part in NAMES if "dedup_add" in DEFINED.findall(own_source(part))]
    assert everywhere.count("dedup_add") == len(steps)
    assert steps == [part for part in NAMES if part.endswith("_add")]


def test_scripts_fail_only_with_the_codes_the_client_maps():
    used = {code for name in NAMES for code in re.findall(r"dedup_fail\('(\w+)'", own_source(name))}
    assert used == SCRIPT_CODES
    # And no other way of failing is left in a script.
    failing = [n for n in NAMES if "error_reply" in own_source(n) or "err =" in own_source(n)]
    assert failing == ["prelude"]


def test_the_server_keeps_no_comment_of_a_script_and_each_line_still_names_its_command():
    """What SCRIPT LOAD sends is the script with its comment lines left empty (half its
    text): every line where it was, so an error's line names the command it calls."""
    for script in scripts.BY_SHA.values():
        kept, full = script.source.split("\n"), script.text.split("\n")
        assert len(kept) == len(full) and len(script.source) < len(script.text)
        assert not [line for line in kept if line.lstrip().startswith("--")]
        for n in range(1, len(full) + 1):
            said = re.search(r"""(?:rcall|redis\.call)\(\s*['"](\w+)['"]""", full[n - 1])
            assert script.command_at(n) == (said.group(1).upper() if said else None)


def test_a_script_without_its_include_line_is_refused(monkeypatch):
    monkeypatch.setattr(scripts, "_read", lambda name: "return 1\n")
    with pytest.raises(ValueError, match="must start with '-- include: prelude"):
        scripts.includes("set_add")


@pytest.mark.single_server
def test_a_script_failure_is_read_by_its_code(server):
    with pytest.raises(redis.ResponseError) as info:
        scripts.BLOOM_CONTAINS(server, ["t:bits"], ["not-hex", 1024, 3])
    failure = script_failure(info.value)
    assert failure is not None and failure.code == "FINGERPRINT"
    assert failure.message.startswith("fingerprint is not a hex digest")
    assert "script:" not in failure.message
    assert code_of(info.value) == "dedup:FINGERPRINT"
    assert not is_transient(info.value)


@pytest.mark.single_server
def test_server_codes_are_read_whatever_the_words(server):
    server.rpush("t:list", "x")
    with pytest.raises(redis.ResponseError) as wrongtype:
        server.hget("t:list", "f")
    assert code_of(wrongtype.value) == "WRONGTYPE"
    server.set("t:big", "x" * 100_000)
    server.config_set("maxmemory", 1)
    try:
        with pytest.raises(redis.ResponseError) as oom:
            scripts.SET_ADD(server, ["t:set"], ["fp"])
    finally:
        server.config_set("maxmemory", 0)
    assert code_of(oom.value) == "OOM" and is_transient(oom.value)
    # Words do not make a code: an error whose text merely mentions one is not it.
    told = redis.ResponseError("value mentions WRONGTYPE and BUSY and dedup:STAMP")
    assert code_of(told) == "ERR" and not is_transient(told) and script_failure(told) is None
    assert code_of(redis.ResponseError("BUSY Redis is busy running a script")) == "BUSY"
    assert is_transient(redis.ResponseError("NOREPLICAS Not enough good replicas to write."))
    assert code_of(redis.ConnectionError("Connection refused")) == ""


@pytest.mark.single_server
def test_translate_gives_the_package_exception_for_each_code(server):
    # The janitor's layout (expiry timestamps in fields), on every server.
    backend = HashBackend(server, "t:h", shards=2, field_expiry=False)
    backend.open()
    shard = backend.shard_of("fp")
    with pytest.raises(redis.ResponseError) as bad_fp:
        scripts.BLOOM_CONTAINS(server, ["t:bits"], ["zz", 1024, 3])
    assert isinstance(translate(bad_fp.value, backend, "zz"), InvalidFingerprintError)
    server.rpush(shard, "x")  # a shard overwritten by another program
    with pytest.raises(redis.ResponseError) as wrongtype:
        backend.check_and_add("fp")
    precise = translate(wrongtype.value, backend, "fp")
    assert isinstance(precise, WrongKeyTypeError) and precise.key == shard
    server.delete(shard)
    server.hset(shard, "fp", "soon")  # a field that is no expiry
    with pytest.raises(redis.ResponseError) as field:
        backend.check_and_add("fp")
    refused = translate(field.value, backend, "fp")
    assert code_of(field.value) == "dedup:FIELD"
    assert isinstance(refused, DedupBackendError)
    assert str(refused).startswith(f"Redis refused a hash dupefilter call: field fp of {shard} ")
    assert "script:" not in str(refused)

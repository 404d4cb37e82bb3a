"""migrate-set-to-bloom: exactness, resume, live writes, errors and exit codes."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from scrapy_dedup_suite.backends import BloomBackend, WindowedBloomBackend
from scrapy_dedup_suite.core.bloom_math import SCHEME, SCHEME_PRIME, BloomParams
from scrapy_dedup_suite.core.windows import WindowSpec
from scrapy_dedup_suite.operations.migrations import SetMigration, VerificationError
from scrapy_dedup_suite.operations.migrations.writers import positions

from .digest_backend import DigestSetBackend
from .helpers import ROOT, all_keys, crawl, fingerprints, setting_args, snapshot
from .helpers import run_command as command

ON_CLUSTER = True  # tests that use `server` also run on the three-master cluster


def fill_set(server, key: str, members: list[str]) -> None:
    pipe = server.pipeline(transaction=False)
    for i in range(0, len(members), 5000):
        pipe.sadd(key, *members[i : i + 5000])
    pipe.execute()


@pytest.mark.parametrize("scheme", [SCHEME, SCHEME_PRIME])
@pytest.mark.parametrize("blocks", [1, 3])
def test_bulk_offsets_equal_the_reference(blocks, scheme):
    """The vectorised path computes exactly BloomParams.positions (and so the Lua)."""
    rng = random.Random(7)
    # The largest block size (m just under 2^32, the largest prime there) and an odd k.
    params = BloomParams(1000, 0.01, 2**32 - 5, 13, blocks, scheme)
    members = [
        *(hashlib.sha1(str(i).encode()).hexdigest() for i in range(3000)),
        *(hashlib.sha256(str(i).encode()).hexdigest().upper() for i in range(500)),
        *("".join(rng.choice("0123456789abcdef") for _ in range(33)) for _ in range(300)),
    ]
    rng.shuffle(members)
    skipped: list[str] = []
    bad = ["not-hex-" * 5, "abc", "g" * 40]
    got = {}
    for block, offsets, chosen in positions(
        [m.encode() for m in members + bad], params, skipped, with_members=True
    ):
        for member, row in zip(chosen, offsets.tolist()):
            got[member.decode()] = (block, row)
    assert sorted(skipped) == sorted(bad)
    assert len(got) == len(members)
    for member in members:
        assert got[member] == params.positions(member)


def test_bulk_bits_are_what_the_lua_sets(server):
    params = BloomParams.from_capacity(20_000, 0.01, blocks=2)
    fps = fingerprints(5000)
    fill_set(server, "src", fps)
    by_lua = BloomBackend(server, "lua", params)
    by_lua.open()
    by_lua.add_many(fps)
    bulk = BloomBackend(server, "bulk", params)
    SetMigration(bulk, "src", batch=700, round_size=2000).run()
    for a, b in zip(by_lua.block_keys, bulk.block_keys):
        assert server.get(a) == server.get(b)


@pytest.mark.subprocess
@pytest.mark.single_server  # scrapy-redis's dupefilter writes the set with a plain client
def test_scrapy_redis_crawl_then_bloom_filters_everything(tmp_path, site, redis_server, server):
    scrapy_redis = {
        "REDIS_URL": redis_server.url,
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_PERSIST": True,
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    }
    first = crawl(tmp_path, site, scrapy_redis, "scrapy-redis")
    assert first["stats"]["downloader/response_status_count/200"] == site.pages
    assert server.scard("site:dupefilter") == site.pages
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy.cmdline", "migrate-set-to-bloom", "--spider", "site",
         "-s", f"REDIS_URL={redis_server.url}", "-s", "DEDUP_BLOOM_CAPACITY=100000",
         "--verify", "all"],
        capture_output=True, text=True, timeout=120, cwd="/",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"migrated {site.pages} fingerprints from 'site:dupefilter'" in proc.stdout
    assert f"verified {site.pages} source members (all): all found" in proc.stdout
    bloom = {
        **scrapy_redis,
        "DUPEFILTER_CLASS": "scrapy_dedup_suite.dupefilter.RFPDupeFilter",
        "DEDUP_BACKEND": "bloom",
        "DEDUP_BLOOM_CAPACITY": 100_000,
    }
    # The start page is fetched (dont_filter) and every link it has is filtered.
    second = crawl(tmp_path, site, bloom, "bloom", start_dont_filter=True)
    stats = second["stats"]
    assert stats["downloader/response_status_count/200"] == 1
    assert stats["bloomfilter/filtered"] == site.links
    assert "dedup/added" not in stats


def test_into_the_current_bucket_of_a_windowed_filter(server):
    fps = fingerprints(3000)
    fill_set(server, "src", fps)
    target = WindowedBloomBackend(
        server, "w", BloomParams.from_capacity(10_000, 0.001), WindowSpec.parse("day", 3)
    )
    report = SetMigration(target, "src").run()
    assert report.migrated == 3000 and report.verified == 3000
    current = target.live_keys()[0][0]
    assert 0 < server.pttl(current) <= 3 * 86400 * 1000
    assert all(target.contains_many(fps))
    assert target.check_and_add(fps[0]) is True


def test_crawler_writes_during_migration_are_kept(server):
    fps = fingerprints(20_000)
    fill_set(server, "src", fps)
    target = BloomBackend(server, "t", BloomParams.from_capacity(100_000, 0.001))
    target.open()
    live = fingerprints(30, salt="live")  # one per batch read (40 batches)
    written: list[str] = []

    def crawler_writes(done: int, total: int) -> None:
        # A crawler records new requests while the migration is between reading
        # a batch and merging its round.
        if len(written) < len(live):
            fp = live[len(written)]
            assert target.check_and_add(fp) is False
            written.append(fp)

    SetMigration(target, "src", batch=500, round_size=5000, progress=crawler_writes).run()
    assert written == live
    assert all(target.contains_many(live))
    assert all(target.contains_many(fps))


class Interrupted(Exception):
    pass


def test_resume_after_an_interrupted_run(server):
    fps = fingerprints(30_000)
    fill_set(server, "src", fps)
    target = BloomBackend(server, "t", BloomParams.from_capacity(100_000, 0.001))

    def die_in_round_three(done: int, total: int) -> None:
        if done > 12_000:
            raise Interrupted

    with pytest.raises(Interrupted):
        SetMigration(target, "src", batch=1000, round_size=5000, progress=die_in_round_three).run()
    state = server.hgetall("t:migration")
    # Two rounds were merged and checkpointed (SSCAN's COUNT is a hint: about 5,000 each).
    assert int(state[b"cursor"]) != 0
    assert 10_000 <= int(state[b"migrated"]) < 12_000
    report = SetMigration(target, "src", batch=1000, round_size=5000, verify="all").run(resume=True)
    assert report.resumed
    assert report.migrated == 30_000
    assert not server.exists("t:migration")
    assert not [k for k in all_keys(server) if b"migrating" in k]
    # A rerun from scratch only sets bits that are set already.
    before = server.get(target.block_keys[0])
    SetMigration(target, "src").run()
    assert server.get(target.block_keys[0]) == before


@pytest.mark.subprocess
def test_kill_9_then_resume(redis_settings, server):
    fill_set(server, "big:dupefilter", fingerprints(200_000))
    base = [
        sys.executable, "-m", "scrapy.cmdline", "migrate-set-to-bloom", "--spider", "big",
        *setting_args(redis_settings), "-s", "DEDUP_BLOOM_CAPACITY=1000000",
        "-s", "DEDUP_BLOOM_BLOCKS=6",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*base, "--batch", "200", "--round", "2000"], env=env, cwd="/",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while int(server.hget("big:bloomfilter:migration", "migrated") or 0) < 4000:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run(
        [*base, "--resume", "--verify", "all"], env=env, cwd="/", capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stdout
    assert "verified 200,000 source members (all): all found" in resumed.stdout


def run_command(redis_settings: dict, *args: str) -> subprocess.CompletedProcess:
    return command("migrate-set-to-bloom", redis_settings, *args)


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("prepare", "args", "code", "message"),
    [
        (lambda s: None, ["--spider", "s"], 3, "'s:dupefilter' does not exist"),
        (lambda s: s.rpush("s:dupefilter", "x"), ["--spider", "s"], 3, "holds a list, not a set"),
        (
            lambda s: s.sadd("{s:bloomfilter:0}", "x"),
            ["--spider", "s"],
            4,
            "holds a set, but this backend stores a string",
        ),
        (
            lambda s: BloomBackend(
                s, "s:bloomfilter", BloomParams.from_capacity(5000, 0.01)
            ).open(),
            ["--spider", "s"],
            4,
            "created with other parameters",
        ),
        (lambda s: None, ["--spider", "s", "--capacity", "100"], 4, "too small"),
        (lambda s: None, ["--spider", "s", "--error-rate", "2"], 1, "DEDUP_BLOOM_ERROR_RATE"),
        (lambda s: None, ["--source", "s:dupefilter"], 2, "Say what to migrate"),
        (lambda s: None, ["--spider", "s", "--batch", "0"], 2, "--batch"),
    ],
)
def test_errors_write_nothing(redis_settings, server, prepare, args, code, message):
    if "does not exist" not in message and "list" not in message:
        fill_set(server, "s:dupefilter", fingerprints(1000))
    prepare(server)
    before = snapshot(server)
    result = run_command(redis_settings, *args)
    assert result.returncode == code, result.stderr
    assert message in result.stderr + result.stdout
    assert snapshot(server) == before


@pytest.mark.subprocess
def test_too_small_names_the_rate_and_force_goes_on(redis_settings, server):
    fill_set(server, "s:dupefilter", fingerprints(1000))
    result = run_command(redis_settings, "--spider", "s", "--capacity", "100")
    assert result.returncode == 4
    assert "false-positive rate would reach about 0.9" in result.stderr
    forced = run_command(redis_settings, "--spider", "s", "--capacity", "100", "--force")
    assert forced.returncode == 0, forced.stderr


def test_resume_near_capacity_is_not_refused(server):
    """Fingerprints already migrated are in the target and still in the source:
    a resumed run must not count them twice against the capacity."""
    fill_set(server, "src", fingerprints(7000))
    target = BloomBackend(server, "t", BloomParams.from_capacity(10_000, 0.001))

    def die_after_half(done: int, total: int) -> None:
        if done >= 4500:
            raise Interrupted

    with pytest.raises(Interrupted):
        SetMigration(target, "src", batch=500, round_size=1000, progress=die_after_half).run()
    plan = SetMigration(target, "src").plan()
    assert plan.items_already > 3000  # so already + 7,000 members would exceed 10,000
    assert plan.items_already + plan.new_members < 10_000
    report = SetMigration(target, "src", verify="all").run(resume=True)
    assert report.verified == 7000
    # Running it all again is harmless and not refused either.
    assert SetMigration(target, "src").run().migrated == 7000


@pytest.mark.subprocess
def test_dry_run_reports_and_writes_nothing(redis_settings, server):
    fill_set(server, "s:dupefilter", fingerprints(1000))
    before = snapshot(server)
    result = run_command(redis_settings, "--spider", "s", "--capacity", "50000", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "a set of 1,000 fingerprints" in result.stdout
    assert "capacity 50,000 at error rate 0.001" in result.stdout
    assert "k = 10" in result.stdout
    assert snapshot(server) == before


@pytest.mark.subprocess
def test_delete_source_after_verification(redis_settings, server):
    fill_set(server, "s:dupefilter", fingerprints(2000))
    result = run_command(redis_settings, "--spider", "s", "--capacity", "5000", "--delete-source")
    assert result.returncode == 0, result.stderr
    assert "source deleted" in result.stdout
    assert not server.exists("s:dupefilter")
    target = BloomBackend(server, "s:bloomfilter", BloomParams.from_capacity(5000, 0.001))
    assert all(target.contains_many(fingerprints(2000)))


def test_delete_source_removes_only_what_the_target_holds(server):
    """Members skipped (not hex) and members crawlers add while the migration runs are
    kept in the set; everything removed is in the filter."""
    fps = fingerprints(20_000)
    fill_set(server, "src", fps)
    server.sadd("src", *[f"not-hex-{i}" for i in range(30)])
    target = BloomBackend(server, "t", BloomParams.from_capacity(100_000, 0.001))
    late = fingerprints(137, salt="late")

    class CrawlersAdd(SetMigration):
        def _verify(self, report):
            super()._verify(report)
            server.sadd("src", *late)  # crawlers go on writing to the set meanwhile

    report = CrawlersAdd(target, "src", batch=1000, round_size=5000).run(delete_source=True)
    left = {m.decode() for m in server.smembers("src")}
    assert {f"not-hex-{i}" for i in range(30)} <= left
    # A late member stays unless the filter holds it anyway (a false positive, 0.1%).
    late_in_filter = target.contains_many(late)
    for fp, held in zip(late, late_in_filter):
        assert (fp in left) is (not held)
    assert sum(late_in_filter) < 5
    assert not left & set(fps)
    assert report.source_removed == 20_000 + sum(late_in_filter)
    assert report.source_kept == len(left) and not report.source_deleted
    assert "kept (not migrated" in report.summary()


def test_a_set_migrates_into_the_hash_backend(server):
    from scrapy_dedup_suite.backends import HashBackend, SetBackend
    from scrapy_dedup_suite.operations.migrations import TargetError

    members = [*fingerprints(3000), "not-a-hex-digest"]  # hash stores any string
    fill_set(server, "src", members)
    target = HashBackend(server, "t:h", shards=4, expire=3600)
    migration = SetMigration(target, "src", batch=500, round_size=1000, verify="all")
    plan = migration.plan()
    assert plan.capacity == 0 and plan.resulting_error_rate == 0.0
    assert "exact; each stays seen for 3,600 s (DEDUP_EXPIRE)" in plan.describe()
    report = migration.run(delete_source=True)
    assert report.migrated == len(members) and report.verified == len(members)
    assert report.skipped == [] and report.source_deleted
    assert all(target.contains_many(members))
    assert sum(server.hlen(k) for k in target.shard_keys) == len(members)
    # A set cannot be the target of a set.
    fill_set(server, "src2", fingerprints(10))
    with pytest.raises(TargetError, match="Choose bloom, windowed-bloom, hash or compact"):
        SetMigration(SetBackend(server, "t:s"), "src2")
    assert server.keys("t:s*") == []


def test_a_set_migrates_into_a_backend_of_ones_own(server):
    """The migration asks its target what it holds (``holding()``), typed, so an exact
    backend of one's own (the test suite's digest set) is a target like the package's."""
    members = fingerprints(3000)
    fill_set(server, "src", members)
    target = DigestSetBackend(server, "t:digests")
    plan = SetMigration(target, "src").plan()
    assert (plan.items_already, plan.blocks, plan.capacity) == (0.0, 1, 0)
    report = SetMigration(target, "src", batch=500, round_size=1000, verify="all").run()
    assert report.migrated == len(members) and report.verified == len(members)
    assert server.scard("t:digests") == len(members)
    again = SetMigration(target, "src").plan()
    assert again.items_already == len(members)  # counted, as an exact filter's are


@pytest.mark.subprocess
def test_a_projects_own_migrations_package_does_not_shadow_the_command(tmp_path):
    """Installed as scrapy_dedup_suite.operations.migrations: a project's top-level migrations/
    (Alembic, Flask-Migrate) on sys.path leaves the command's entry point intact."""
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "__init__.py").write_text("ALEMBIC = True\n")
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy.cmdline", "migrate-set-to-bloom", "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "migrate-set-to-bloom (--spider NAME" in proc.stdout


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("command", "text", "instead", "wrong"),
    [
        ("dedup-janitor", "hash fields per Redis call", "with --key", None),
        ("migrate-set-to-bloom", "target backend", "--source and --target", "--key"),
        ("dedup-info", "what Redis holds", "as the crawl uses it\n", "--key"),
        ("dedup-forget", "Removes the fingerprints of the URLs", "with --key", None),
    ],
)
def test_command_help_and_a_missing_spider(command, text, instead, wrong):
    """Help texts render as text (a line ending in a colon would become a heading),
    and a spider that is not in the project gets advice with the command's own options."""
    project = ROOT / "example_project"
    run = [sys.executable, "-m", "scrapy.cmdline", command]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    helped = subprocess.run([*run, "--help"], cwd=project, capture_output=True, text=True, env=env)
    assert helped.returncode == 0, helped.stderr[-2000:]
    words = " ".join(helped.stdout.split())  # the formatter wraps the text anywhere
    assert text in words
    assert text.title() not in words
    missing = subprocess.run(
        [*run, "--spider", "nosuch"], cwd=project, capture_output=True, text=True, env=env
    )
    assert missing.returncode == 2
    assert "Spider 'nosuch' not found in this project" in missing.stderr + missing.stdout
    assert instead in missing.stderr + missing.stdout
    if wrong:
        assert wrong not in missing.stderr + missing.stdout


def test_failed_verification_keeps_the_source(server, monkeypatch):
    from scrapy_dedup_suite.operations.migrations.writers import BitsWriter

    fill_set(server, "src", fingerprints(500))
    # A broken merge: nothing reaches Redis.
    monkeypatch.setattr(BitsWriter, "_merge", lambda self, maps, counts, token: None)
    target = BloomBackend(server, "t", BloomParams.from_capacity(5000, 0.001))
    with pytest.raises(VerificationError, match="500 of 500 source fingerprints are not"):
        SetMigration(target, "src", sample=1000).run(delete_source=True)
    assert server.scard("src") == 500


@pytest.mark.subprocess
def test_the_command_migrates_a_set_into_a_compact_filter(redis_settings, server):
    from scrapy_dedup_suite.backends import CompactBackend

    members = [*fingerprints(3000), "not-a-hex-digest"]  # any string, as the set holds
    fill_set(server, "s:dupefilter", members)
    proc = run_command(
        redis_settings, "--spider", "s", "--to", "compact", "-s", "DEDUP_COMPACT_CAPACITY=10000",
        "--verify", "all", "--delete-source",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "verified 3,001 source members (all): all found" in proc.stdout
    target = CompactBackend(server, "s:dedup-compact", capacity=10_000)
    target.open()
    assert target.count() == len(members)
    assert all(target.contains_many(members))
    assert not server.exists("s:dupefilter")


@pytest.mark.subprocess
@pytest.mark.parametrize("to", ["compact", "hash"])
def test_capacity_is_honoured_for_bucket_targets_with_advice_that_is_accepted(
    redis_settings, server, to
):
    """--capacity sizes a compact or hash target; a set larger than it is refused (exit
    4) with the capacity to set, writing nothing, and that capacity is then accepted.
    The plan says what an exact target does (sized for, memory, never "0 s")."""
    fill_set(server, "s:dupefilter", fingerprints(2_000))
    before = snapshot(server)
    refused = run_command(redis_settings, "--spider", "s", "--to", to, "--capacity", "1000")
    assert refused.returncode == 4, refused.stderr
    message = refused.stderr.strip().splitlines()[-1]
    assert "exceed the 1,000 its buckets are sized for" in message
    assert "Set --capacity (or DEDUP_COMPACT_CAPACITY) to at least 2,000" in message
    assert snapshot(server) == before
    dry = run_command(
        redis_settings, "--spider", "s", "--to", to, "--capacity", "3000", "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    assert "sized for 3,000 (DEDUP_COMPACT_CAPACITY)" in dry.stdout
    assert " 0 s " not in dry.stdout
    if to == "compact":
        assert "each stays seen for good" in dry.stdout
    done = run_command(redis_settings, "--spider", "s", "--to", to, "--capacity", "3000")
    assert done.returncode == 0, done.stderr
    key = "s:dedup-compact" if to == "compact" else "s:dedup-hash"
    assert server.hget(f"{key}:meta", "sized_for") == b"3000"


def test_sample_verification_checks_what_the_scan_could_read(server):
    """Crawlers adding members to the source set while it is read: the sample verified
    is of members that were there when the scan began (the scan reads those), so a
    member added after the scan passed its place does not fail the migration."""
    from scrapy_dedup_suite.backends import CompactBackend

    fill_set(server, "src", fingerprints(5_000))
    target = CompactBackend(server, "t:c", capacity=100_000, shards=4)
    late = fingerprints(20_000, salt="late")
    added: list[str] = []

    def crawler_adds(done: int, total: int) -> None:
        while len(added) < len(late) and len(added) < 4 * done:  # four new for each read
            added.append(late[len(added)])
            server.sadd("src", added[-1])

    report = SetMigration(
        target, "src", batch=250, round_size=1000, sample=5_000, progress=crawler_adds
    ).run()
    assert added  # the set grew while it was read
    assert report.verified > 0


def test_progress_goes_to_a_file_or_pipe_line_by_line():
    """stderr redirected (``> log 2>&1``): a line each interval, and one at the end,
    written to the stream itself (the commands configure no logging, so a log record
    would never show)."""
    import io

    from scrapy_dedup_suite.operations.migrations.migration_report import Progress

    stream = io.StringIO()  # not a terminal
    progress = Progress(stream, every=0.0)
    progress(500, 1000)
    progress(1000, 1000, final=True)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("migrate-set-to-bloom: 500/1,000 (50.0%)")
    assert lines[1].startswith("migrate-set-to-bloom: 1,000/1,000 (100.0%)")


def test_ctrl_c_says_how_far_and_resume_counts_true(server, monkeypatch):
    """Ctrl-C while reading: one line with how far it got and --resume. Ctrl-C during
    verification, after the whole set was read: --resume verifies, reads nothing again,
    and reports the set's count, not twice it."""
    from scrapy_dedup_suite.commands.migrate_set_to_bloom import Command

    fps = fingerprints(5_000)
    fill_set(server, "src", fps)
    target = BloomBackend(server, "t", BloomParams.from_capacity(50_000, 0.001))
    calls = []

    def ctrl_c_in_round_three(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    migration = SetMigration(
        target, "src", batch=500, round_size=1000, progress=ctrl_c_in_round_three
    )
    with pytest.raises(KeyboardInterrupt):
        migration.run()
    said = Command._interrupted(migration)
    assert said.startswith("interrupted: ") and "--resume" in said and "\n" not in said
    assert "read so far" in said
    report = SetMigration(target, "src", batch=500, round_size=1000).run(resume=True)
    assert report.migrated == len(fps)

    # Interrupted during verification: the scan had finished.
    target2 = BloomBackend(server, "t2", BloomParams.from_capacity(50_000, 0.001))
    real_verify = SetMigration._verify

    def ctrl_c(self, report):
        raise KeyboardInterrupt

    monkeypatch.setattr(SetMigration, "_verify", ctrl_c)
    interrupted = SetMigration(target2, "src", batch=500, round_size=1000)
    with pytest.raises(KeyboardInterrupt):
        interrupted.run()
    assert "all read, not yet verified" in Command._interrupted(interrupted)
    monkeypatch.setattr(SetMigration, "_verify", real_verify)
    resumed = SetMigration(target2, "src", batch=500, round_size=1000).run(resume=True)
    assert resumed.migrated == len(fps) and resumed.rounds == 0 and resumed.resumed
    assert resumed.verified > 0


@pytest.mark.parametrize("kind", ["compact", "bloom"])
def test_a_rerun_and_a_resume_report_the_same_target_memory_and_this_run_s_rate(server, kind):
    """The review saw a rerun's "target memory" double (3.9 KiB, then 7.7 KiB) and a
    resumed run's rate count what was moved before the interruption. The memory after a
    run is MEMORY USAGE of the target's keys; a rerun's plan counts the members already
    there once."""
    from scrapy_dedup_suite.backends import CompactBackend

    fps = fingerprints(6_000, salt="again")
    fill_set(server, "src", fps)

    def target():
        if kind == "compact":
            return CompactBackend(server, "t:again", capacity=10_000, shards=4)
        return BloomBackend(server, "t:again", BloomParams.from_capacity(20_000, 0.001))

    first = SetMigration(target(), "src", batch=500, round_size=1000).run()
    assert first.target_memory == sum(
        int(server.memory_usage(k, samples=0) or 0) for k in all_keys(server) if b"again" in k
    )
    again = SetMigration(target(), "src", batch=500, round_size=1000).run()
    assert again.target_memory == first.target_memory
    assert again.plan.target_memory == first.plan.target_memory
    assert again.plan.items_already + again.plan.new_members == pytest.approx(6_000, rel=0.05)
    assert "(MEMORY USAGE of its keys)" in again.summary()

    # Interrupted after some rounds, then resumed: the rate is of what the resumed run moved.
    server.delete(*[k for k in all_keys(server) if b"again" in k])

    def die_in_round_three(done: int, total: int) -> None:
        if done > 2_500:
            raise Interrupted

    with pytest.raises(Interrupted):
        SetMigration(target(), "src", batch=500, round_size=1000, progress=die_in_round_three).run()
    resumed = SetMigration(target(), "src", batch=500, round_size=1000).run(resume=True)
    assert resumed.migrated == 6_000 and 0 < resumed.moved_before < 6_000
    assert resumed.rate == pytest.approx((6_000 - resumed.moved_before) / resumed.seconds)
    assert f"resumed after {resumed.moved_before:,} moved before" in resumed.summary()
    # The same fingerprints in a filter built again: the same memory but for the
    # allocator's rounding (Valkey's differs by a few dozen bytes), never twice.
    assert resumed.target_memory == pytest.approx(first.target_memory, rel=0.01)

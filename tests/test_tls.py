"""TLS (issue 53): a crawl and a command over ``rediss://`` to a server started with
``--tls-port`` and a certificate made here; an untrusted certificate is one line naming
the setting that fixes it. The server is the suite's redis-server (Debian's is built
with TLS); one built without TLS skips, saying so."""

from __future__ import annotations

import datetime
import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from scrapy_dedup_suite.embedded import EmbeddedRedis, EmbeddedServerError, free_port

from .helpers import SCHEDULERS, crawl
from .servers import Site, redis_server_binary
from .test_messages import scrapy_cmd


def make_certificates(where: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for 127.0.0.1 it signed: (ca, certificate, key) files."""
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    def signed(subject: str, key: ec.EllipticCurvePrivateKey, ca: bool) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name("test CA"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )  # fmt: skip

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = signed("test CA", ca_key, True).sign(ca_key, hashes.SHA256())
    ip = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = signed("127.0.0.1", key, False).add_extension(ip, critical=False)
    files = where / "ca.pem", where / "server.pem", where / "server.key"
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(
        cert.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    )
    plain = serialization.NoEncryption()
    pem, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    files[2].write_bytes(key.private_bytes(pem, pkcs8, plain))
    return files


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A server speaking TLS on a port of its own: its rediss:// URL and the CA file."""
    where = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_certificates(where)
    port = free_port()
    args = ["--tls-port", str(port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    args += ["--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"]
    server = EmbeddedRedis(binary=redis_server_binary(), extra_args=args)
    try:
        server.start()
    except EmbeddedServerError as exc:
        pytest.skip(
            f"{redis_server_binary()} does not start with --tls-port (built without TLS?): {exc}"
        )
    yield f"rediss://127.0.0.1:{port}/0", ca
    server.stop()


def test_a_frontier_crawl_over_tls_fetches_every_page_as_over_plain_tcp(
    tmp_path, tls, redis_server
):
    url, ca = tls
    site = Site(pages=30, links=3).start()
    try:
        common = {"SCHEDULER": SCHEDULERS["frontier"], "DEDUP_BACKEND": "compact"}
        over_tls = {**common, "REDIS_URL": url, "REDIS_PARAMS": {"ssl_ca_certs": str(ca)}}
        over_tls["SCHEDULER_PERSIST"] = True  # (its keys stay, to be read below)
        plain = {**common, "REDIS_URL": redis_server.url, "SCHEDULER_PERSIST": False}
        # The shared server: what an earlier test left for a spider of the same name (a
        # filter of other parameters) would refuse the crawl at its open.
        redis.Redis.from_url(redis_server.url).flushall()
        a = crawl(tmp_path, site, over_tls, "tls")["stats"]
        b = crawl(tmp_path, site, plain, "plain")["stats"]
    finally:
        site.stop()
    assert a["finish_reason"] == b["finish_reason"] == "finished"
    assert a["downloader/response_count"] == b["downloader/response_count"] == 30
    client = redis.Redis.from_url(url, ssl_ca_certs=str(ca))
    assert any(b"dedup-compact" in key for key in client.scan_iter())  # (written over TLS)


def test_an_untrusted_certificate_is_one_line_naming_the_setting_and_its_advice_works(tls):
    url, ca = tls
    refused = scrapy_cmd("dedup-info", "--spider", "s", "-s", f"REDIS_URL={url}")
    assert refused.returncode == 6, refused.stderr[-2000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert "TLS certificate this client does not trust" in line
    assert "set REDIS_PARAMS ssl_ca_certs to the file of the CA" in line
    assert "Traceback" not in refused.stderr
    for params in ({"ssl_ca_certs": str(ca)}, {"ssl_cert_reqs": "none"}):
        given = ["-s", f"REDIS_URL={url}", "-s", f"REDIS_PARAMS={json.dumps(params)}"]
        taken = scrapy_cmd("dedup-info", "--spider", "s", *given)
        assert taken.returncode == 0, taken.stderr[-2000:]

"""Authentication (cleartext, md5, SCRAM-SHA-256; a wrong password gets 28P01 and the
connection closes) and TLS (SSLRequest answered S with a certificate, N without)."""
import asyncio
import datetime as dt

import asyncpg
import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@pytest.mark.parametrize("method", ["password", "md5", "scram-sha-256"])
def test_password_methods(start_server, method):
    s = start_server("--auth", method, "--users", "alice:s3cret")
    dsn = f"host=127.0.0.1 port={s.port} user=alice dbname=x"
    with psycopg.connect(dsn + " password=s3cret") as c:
        assert c.execute("SELECT current_user").fetchone() == ("alice",)
    for bad in (dsn + " password=wrong", dsn.replace("alice", "bob") + " password=s3cret"):
        with pytest.raises(psycopg.OperationalError) as e:
            psycopg.connect(bad)
        assert "password authentication failed for user" in str(e.value)


def test_asyncpg_scram(start_server):
    s = start_server("--auth", "scram-sha-256", "--users", "alice:s3cret")

    async def main():
        conn = await asyncpg.connect(host="127.0.0.1", port=s.port, user="alice",
                                     password="s3cret", database="x")
        try:
            return await conn.fetchval("SELECT 40 + 2")
        finally:
            await conn.close()

    assert asyncio.run(asyncio.wait_for(main(), 30)) == 42


def test_users_file(start_server, tmp_path):
    users = tmp_path / "users"
    users.write_text("# user:password\ncarol:pa:ss\n")
    s = start_server("--auth", "md5", "--users-file", str(users))
    with psycopg.connect(f"host=127.0.0.1 port={s.port} user=carol password=pa:ss") as c:
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_sslmode_require_without_certificate_fails_clearly(server):
    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect(server.dsn + " sslmode=require")
    assert "server does not support SSL" in str(e.value)


def _self_signed(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30)).sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "server.crt", tmp_path / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_tls(start_server, tmp_path):
    cert, key = _self_signed(tmp_path)
    s = start_server("--tls-cert", cert, "--tls-key", key, "--require-tls")
    with psycopg.connect(s.dsn + " sslmode=require") as c:
        assert c.pgconn.ssl_in_use
        assert c.execute("SELECT 'secret'").fetchone() == ("secret",)
    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect(s.dsn + " sslmode=disable")
    assert "accepts only TLS connections" in str(e.value)


def test_settings_from_environment(start_server):
    s = start_server(env={"CQGATE_AUTH": "md5", "CQGATE_USERS": "dave:pw"})
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(f"host=127.0.0.1 port={s.port} user=dave password=nope")
    with psycopg.connect(f"host=127.0.0.1 port={s.port} user=dave password=pw") as c:
        assert c.execute("SELECT 1").fetchone() == (1,)

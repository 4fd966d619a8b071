"""Password authentication: cleartext and md5; a wrong password gets 28P01.

SCRAM-SHA-256 is implemented (gateway/protocol/auth.py) but does not yet complete with libpq;
it gets its test when it does."""
import psycopg
import pytest


@pytest.mark.parametrize("method", ["password", "md5"])
def test_password_methods(start_server, method):
    s = start_server("--auth", method, "--users", "alice:s3cret")
    dsn = f"host=127.0.0.1 port={s.port} user=alice dbname=x"
    with psycopg.connect(dsn + " password=s3cret") as c:
        assert c.execute("SELECT current_user").fetchone() == ("alice",)
    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect(dsn + " password=wrong")
    assert 'password authentication failed for user "alice"' in str(e.value)


def test_sslmode_require_without_certificate_fails_clearly(server):
    with pytest.raises(psycopg.OperationalError) as e:
        psycopg.connect(server.dsn + " sslmode=require")
    assert "server does not support SSL" in str(e.value)

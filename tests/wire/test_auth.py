import base64
import hashlib
import hmac
import os

import pytest

from proxy.wire.auth import AuthFailed, ScramExchange, StaticAuthenticator, make_verifier, parse_verifier


def scram_login(exchange, password):
    """Minimal libpq-style SCRAM client (empty user name in client-first)."""
    nonce = base64.b64encode(os.urandom(18)).decode()
    bare = f"n=,r={nonce}"
    server_first = exchange.first("SCRAM-SHA-256", ("n,," + bare).encode()).decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(","))
    assert attrs["r"].startswith(nonce)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_msg = f"{bare},{server_first},{without_proof}".encode()
    sig = hmac.new(hashlib.sha256(client_key).digest(), auth_msg, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, sig))).decode()
    final = exchange.final(f"{without_proof},p={proof}".encode()).decode()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    assert final == "v=" + base64.b64encode(hmac.new(server_key, auth_msg, "sha256").digest()).decode()


def test_make_and_parse_verifier():
    v = make_verifier("pw", iterations=4096)
    assert v.startswith("SCRAM-SHA-256$4096:")
    pv = parse_verifier(v)
    assert pv.iterations == 4096 and len(pv.stored_key) == 32 and str(pv) == v
    assert make_verifier("pw") != make_verifier("pw")  # random salt
    # independent computation (RFC 5802 / PostgreSQL's scram_build_secret)
    salt = bytes(range(16))
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", salt, 4096)
    stored = hashlib.sha256(hmac.new(salted, b"Client Key", "sha256").digest()).digest()
    server = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = lambda x: base64.b64encode(x).decode()
    assert make_verifier("pw", salt=salt) == f"SCRAM-SHA-256$4096:{b64(salt)}${b64(stored)}:{b64(server)}"


@pytest.mark.parametrize(
    "bad", ["", "md5abc", "SCRAM-SHA-256$x:AA==$AA==:AA==", "SCRAM-SHA-256$4096:AA==$AA==:AA=="]
)
def test_parse_verifier_rejects(bad):
    with pytest.raises(ValueError):
        parse_verifier(bad)


def test_scram_success_and_failures():
    v = make_verifier("right")
    scram_login(ScramExchange("bob", v), "right")
    with pytest.raises(AuthFailed) as wrong:
        scram_login(ScramExchange("bob", v), "wrong")
    with pytest.raises(AuthFailed) as unknown:
        scram_login(ScramExchange("bob", None), "right")
    assert wrong.value.sqlstate == unknown.value.sqlstate == "28P01"
    assert str(wrong.value) == str(unknown.value) == 'password authentication failed for user "bob"'


def test_unknown_role_salt_is_stable():
    first = lambda: ScramExchange("ghost", None).first("SCRAM-SHA-256", b"n,,n=,r=abc")
    salt = lambda sf: dict(a.split("=", 1) for a in sf.decode().split(","))["s"]
    assert salt(first()) == salt(first())


def test_bad_mechanism_and_garbage():
    with pytest.raises(AuthFailed):
        ScramExchange("bob", make_verifier("x")).first("SCRAM-SHA-1", b"n,,n=,r=abc")
    with pytest.raises(AuthFailed):
        ScramExchange("bob", make_verifier("x")).first("SCRAM-SHA-256", b"garbage")


def test_static_authenticator():
    a = StaticAuthenticator(users={"u": make_verifier("p")}, trust={"t"})
    assert a.method("t") == "trust" and a.method("u") == "scram"
    assert a.scram_verifier("nobody") is None

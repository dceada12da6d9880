"""The pure token module: keys in Pulsar's forms, tokens made and checked, durations."""

from __future__ import annotations

import base64

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from magnetar.security import tokens


def data_url(key: bytes) -> str:
    return "data:;base64," + base64.b64encode(key).decode()


def test_secret_key_is_raw_random_bytes_of_the_algorithms_size():
    assert len(tokens.create_secret_key()) == 32
    assert len(tokens.create_secret_key("HS512")) == 64
    assert tokens.create_secret_key() != tokens.create_secret_key()
    with pytest.raises(ValueError):
        tokens.create_secret_key("RS256")


def test_key_forms(tmp_path):
    key = tokens.create_secret_key()
    path = tmp_path / "k"
    path.write_bytes(key)
    assert tokens.read_key_bytes(f"file://{path}") == key
    assert tokens.read_key_bytes(str(path)) == key
    assert tokens.read_key_bytes(data_url(key)) == key
    assert tokens.read_key_bytes(base64.b64encode(key).decode()) == key
    with pytest.raises(tokens.KeyConfigError, match="cannot read key file"):
        tokens.read_key_bytes(f"file://{tmp_path}/missing")
    with pytest.raises(tokens.KeyConfigError):
        tokens.read_key_bytes("no such thing!")
    with pytest.raises(tokens.KeyConfigError, match="empty"):
        tokens.load_secret_key("data:;base64,")


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_is_der_and_signs_tokens_its_public_key_checks(algorithm):
    private_der, public_der = tokens.create_key_pair(algorithm)
    serialization.load_der_private_key(private_der, None)  # DER PKCS#8, as Pulsar writes
    serialization.load_der_public_key(public_der)  # DER X.509
    private = tokens.load_private_key(data_url(private_der))
    public = tokens.load_public_key(data_url(public_der))
    token = tokens.create_token(private, "role-a", 60)
    assert jwt.get_unverified_header(token)["alg"] == algorithm
    verified = tokens.verify_token(token, public, tokens.algorithms_for_public_key(public, algorithm))
    assert verified.role == "role-a" and verified.expires_at is not None


def test_pem_keys_read_too():
    _, public_der = tokens.create_key_pair("RS256")
    public = serialization.load_der_public_key(public_der)
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert tokens.load_public_key(data_url(pem)).public_numbers() == public.public_numbers()


def test_public_alg_must_match_the_key_type():
    _, public_der = tokens.create_key_pair("ES256")
    public = tokens.load_public_key(data_url(public_der))
    with pytest.raises(tokens.KeyConfigError, match="not an RSA key"):
        tokens.algorithms_for_public_key(public, "RS256")
    with pytest.raises(tokens.KeyConfigError, match="token_public_alg must be"):
        tokens.algorithms_for_public_key(public, "HS256")


def test_verify_refusals():
    key = tokens.create_secret_key()
    ok = tokens.create_token(key, "alice", 60, now=1000.0)
    assert tokens.verify_token(ok, key, ["HS256"], leeway=10**10).role == "alice"
    cases = {
        "expired": (tokens.create_token(key, "a", -1), "expired"),
        "signature": (tokens.create_token(tokens.create_secret_key(), "a"), "signature"),
        "malformed": ("a.b.c", "malformed"),
        "empty": ("", "no token"),
        "binary": (b"\xff\xfe", "not ASCII"),
        "no sub": (jwt.encode({"x": 1}, key, algorithm="HS256"), "'sub' claim"),
        "sub not text": (jwt.encode({"sub": 5}, key, algorithm="HS256"), "sub|Subject"),
        "alg none": (jwt.encode({"sub": "a"}, None, algorithm="none"), "algorithm|malformed"),
    }
    for name, (token, reason) in cases.items():
        with pytest.raises(tokens.InvalidToken, match=reason):
            tokens.verify_token(token, key, ["HS256"])
        assert name


def test_whitespace_around_a_token_or_a_key_setting_is_dropped(tmp_path):
    """A token read with ``open(f).read()`` ends in a newline, and the official client sends it so."""
    key = tokens.create_secret_key()
    token = tokens.create_token(key, "alice")
    for padded in (token + "\n", f"  {token}\r\n", (token + "\n").encode(), f"\t{token}".encode()):
        assert tokens.verify_token(padded, key, ["HS256"]).role == "alice"
    assert tokens.show_token(token + "\n")[1] == {"sub": "alice"}
    assert tokens.unverified_expiry(tokens.create_token(key, "a", 60) + "\n") is not None
    with pytest.raises(tokens.InvalidToken, match="no token"):
        tokens.verify_token(" \n", key, ["HS256"])
    path = tmp_path / "k"
    path.write_bytes(key)
    assert tokens.read_key_bytes(f" file://{path}\n") == key
    assert tokens.read_key_bytes(data_url(key) + "\n") == key


def test_a_key_files_bytes_are_kept_as_they_are(tmp_path):
    """A raw secret key may end in bytes that read as whitespace: they are part of the key."""
    key = b"\n" + tokens.create_secret_key()[:30] + b" \n"
    path = tmp_path / "k"
    path.write_bytes(key)
    assert tokens.load_secret_key(f"file://{path}") == key


def test_role_claim_and_expiry():
    key = tokens.create_secret_key()
    token = jwt.encode({"sub": "s", "role": "r", "exp": 2_000_000_000}, key, algorithm="HS256")
    verified = tokens.verify_token(token, key, ["HS256"], role_claim="role")
    assert verified.role == "r" and verified.expires_at == 2_000_000_000
    assert tokens.verify_token(tokens.create_token(key, "forever"), key, ["HS256"]).expires_at is None


@pytest.mark.parametrize(
    "text, seconds",
    [("30", 30), ("30s", 30), ("10m", 600), ("1h", 3600), ("3d", 259200), ("2w", 1209600), ("1y", 31536000)],
)
def test_durations(text, seconds):
    assert tokens.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "-1h", "1.5h"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        tokens.parse_duration(text)


def test_show_token():
    key = tokens.create_secret_key()
    header, claims = tokens.show_token(tokens.create_token(key, "shown"))
    assert header["alg"] == "HS256" and claims == {"sub": "shown"}
    with pytest.raises(tokens.InvalidToken):
        tokens.show_token("nonsense")


def test_module_imports_nothing_else_of_magnetar():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(tokens.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert not {m for m in imported if m and m.startswith("magnetar")}

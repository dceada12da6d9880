"""JWT tokens as Pulsar's ``AuthTokenUtils`` / ``pulsar tokens`` make and check them.

Pure functions over PyJWT and ``cryptography`` (no signature code of our own), importing
nothing else of Magnetar, so the broker, the admin API, the CLI and the client share them.

Pulsar's facts kept here:
- a secret key is raw random bytes (32 for HS256), written as they are or in base64;
- a key pair is written DER-encoded (PKCS#8 private key, X.509 SubjectPublicKeyInfo public key);
  PEM is also read, for keys made with openssl;
- keys are given as ``data:;base64,<base64>``, ``file:///path``, a plain path, or (as Pulsar's
  ``readKeyFromUrl`` falls back to) the base64 text itself;
- a token's role is its ``sub`` claim (or the ``token_auth_claim``), ``exp`` is honoured;
- expiry times are relative, ``30s``, ``10m``, ``1h``, ``3d``, ``2w``, ``1y`` (a bare number: seconds).

Whitespace around a token or a key setting is dropped (a token read with ``open(f).read()`` keeps
the file's last newline; the official client sends it as given). A key file's bytes are kept as they
are: a raw secret key may end in a byte that reads as whitespace.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

#: Pulsar's default algorithms: ``create-secret-key`` HS256, ``create-key-pair`` RS256.
DEFAULT_SECRET_ALGORITHM = "HS256"
DEFAULT_KEY_PAIR_ALGORITHM = "RS256"
SECRET_ALGORITHMS = {"HS256": 32, "HS384": 48, "HS512": 64}  # key bytes, as jjwt's secretKeyFor
RSA_ALGORITHMS = ("RS256", "RS384", "RS512")
EC_ALGORITHMS: dict[str, type[ec.EllipticCurve]] = {
    "ES256": ec.SECP256R1,
    "ES384": ec.SECP384R1,
    "ES512": ec.SECP521R1,
}
KEY_PAIR_ALGORITHMS = (*RSA_ALGORITHMS, *EC_ALGORITHMS)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


class KeyConfigError(ValueError):
    """A key setting or file that cannot be read or used."""


class InvalidToken(Exception):
    """A token refused: malformed, wrongly signed, expired, or without its role claim."""


@dataclass(frozen=True)
class VerifiedToken:
    role: str
    #: ``exp`` as a Unix time, None for a token that never expires.
    expires_at: float | None
    claims: dict[str, Any]


# -- keys ------------------------------------------------------------------------------------------
def read_key_bytes(source: str) -> bytes:
    """The bytes a key setting names, in Pulsar's forms (see the module docstring)."""
    source = source.strip()
    if source.startswith("data:"):
        header, _, payload = source.partition(",")
        if not header.endswith(";base64"):
            return unquote(payload).encode()
        return _b64decode(payload, "the data: URL's base64")
    if source.startswith("file:"):
        path = unquote(urlparse(source).path)
        return _read_file(Path(path))
    if os.path.exists(source):
        return _read_file(Path(source))
    try:
        return base64.b64decode(source, validate=True)
    except (binascii.Error, ValueError):
        raise KeyConfigError(
            f"key {source[:40]!r} is no file:///path, data:;base64,... URL, existing file or base64"
        ) from None


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KeyConfigError(f"cannot read key file {path}: {exc.strerror or exc}") from None


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyConfigError(f"{what} is not valid base64") from None


def load_secret_key(source: str) -> bytes:
    """A secret key from a setting. Pulsar's file holds the raw bytes; one written with
    ``--base64`` holds their base64 text, which is taken as Pulsar takes it: as raw bytes too."""
    key = read_key_bytes(source)
    if not key:
        raise KeyConfigError("the secret key is empty")
    return key


def load_public_key(source: str) -> Any:
    """A public key (DER X.509 as Pulsar writes it, or PEM) from a setting."""
    data = read_key_bytes(source)
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except ValueError as exc:
        raise KeyConfigError(f"not a public key (DER or PEM): {exc}") from None


def load_private_key(source: str) -> Any:
    """A private key (DER PKCS#8 as Pulsar writes it, or PEM) from a setting."""
    data = read_key_bytes(source)
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyConfigError(f"not an unencrypted private key (DER or PEM): {exc}") from None


def create_secret_key(algorithm: str = DEFAULT_SECRET_ALGORITHM) -> bytes:
    if algorithm not in SECRET_ALGORITHMS:
        raise ValueError(f"secret key algorithm must be one of {', '.join(SECRET_ALGORITHMS)}")
    return os.urandom(SECRET_ALGORITHMS[algorithm])


def create_key_pair(algorithm: str = DEFAULT_KEY_PAIR_ALGORITHM) -> tuple[bytes, bytes]:
    """(private key DER PKCS#8, public key DER X.509), as ``pulsar tokens create-key-pair`` writes them."""
    if algorithm in RSA_ALGORITHMS:
        private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in EC_ALGORITHMS:
        private = ec.generate_private_key(EC_ALGORITHMS[algorithm]())
    else:
        raise ValueError(f"key pair algorithm must be one of {', '.join(KEY_PAIR_ALGORITHMS)}")
    private_der = private.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_der = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_der, public_der


def algorithms_for_public_key(key: Any, public_alg: str) -> list[str]:
    """The token algorithms a public key checks: those of ``public_alg``'s family (Pulsar's
    ``tokenPublicAlg``), refusing a key of another type."""
    if public_alg in RSA_ALGORITHMS:
        if not isinstance(key, rsa.RSAPublicKey):
            raise KeyConfigError(f"token_public_alg is {public_alg} but the public key is not an RSA key")
        return list(RSA_ALGORITHMS)
    if public_alg in EC_ALGORITHMS:
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise KeyConfigError(f"token_public_alg is {public_alg} but the public key is not an EC key")
        return [public_alg]
    raise KeyConfigError(
        f"token_public_alg must be one of {', '.join(KEY_PAIR_ALGORITHMS)}, not {public_alg!r}"
    )


def _algorithm_for_private_key(key: Any) -> str:
    if isinstance(key, rsa.RSAPrivateKey):
        return "RS256"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        for name, curve in EC_ALGORITHMS.items():
            if isinstance(key.curve, curve):
                return name
    raise KeyConfigError("the private key is neither RSA nor EC (P-256, P-384, P-521)")


# -- tokens ----------------------------------------------------------------------------------------
def parse_duration(text: str) -> int:
    """Seconds in a relative time such as ``1h`` (Pulsar's ``RelativeTimeUtil``)."""
    text = text.strip()
    unit = text[-1:].lower()
    number = text[:-1] if unit in _UNITS else text
    try:
        value = int(number)
    except ValueError:
        raise ValueError(f"invalid expiry time {text!r}: use e.g. 30s, 10m, 1h, 3d, 2w, 1y") from None
    if value < 0:
        raise ValueError(f"invalid expiry time {text!r}: negative")
    return value * _UNITS.get(unit, 1)


def create_token(
    key: bytes | Any,
    subject: str,
    expires_in: float | None = None,
    algorithm: str | None = None,
    now: float | None = None,
) -> str:
    """A signed token whose ``sub`` is ``subject`` (with ``exp`` ``expires_in`` seconds from now).
    ``key`` is a secret key's bytes (HS256 unless ``algorithm`` says) or a private key object."""
    claims: dict[str, Any] = {"sub": subject}
    if expires_in is not None:
        claims["exp"] = int((time.time() if now is None else now) + expires_in)
    if isinstance(key, bytes | bytearray):
        algorithm = algorithm or DEFAULT_SECRET_ALGORITHM
    else:
        algorithm = algorithm or _algorithm_for_private_key(key)
    return jwt.encode(claims, key, algorithm=algorithm)


def verify_token(
    token: str | bytes,
    key: bytes | Any,
    algorithms: list[str],
    role_claim: str = "sub",
    leeway: float = 0,
) -> VerifiedToken:
    """Check a token's signature and ``exp``; its role is the ``role_claim`` claim. Raises
    ``InvalidToken`` with the reason."""
    if isinstance(token, bytes):
        try:
            token = token.decode("ascii")
        except UnicodeDecodeError:
            raise InvalidToken("the token is not ASCII text") from None
    token = token.strip()
    if not token:
        raise InvalidToken("no token given")
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=algorithms,
            leeway=leeway,
            options={"require": [], "verify_aud": False},
        )
    except jwt.ExpiredSignatureError:
        raise InvalidToken("the token has expired") from None
    except jwt.InvalidSignatureError:
        raise InvalidToken("the token's signature does not verify") from None
    except jwt.InvalidAlgorithmError:
        raise InvalidToken("the token is signed with an algorithm this key does not check") from None
    except jwt.PyJWTError as exc:
        raise InvalidToken(f"malformed token: {exc}") from None
    except Exception as exc:  # a library failure on hostile input is a refusal, not a crash
        raise InvalidToken(f"malformed token: {type(exc).__name__}") from None
    role = claims.get(role_claim)
    if not isinstance(role, str) or not role:
        raise InvalidToken(f"the token has no {role_claim!r} claim naming a role")
    exp = claims.get("exp")
    return VerifiedToken(role, float(exp) if isinstance(exp, int | float) else None, claims)


def unverified_expiry(token: str) -> float | None:
    """``exp`` of a token without checking it (for a client deciding when to refresh)."""
    try:
        exp = jwt.decode(token.strip(), options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return None
    return float(exp) if isinstance(exp, int | float) else None


def show_token(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, claims) of a token, unchecked, as ``pulsar tokens show`` prints them."""
    token = token.strip()
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise InvalidToken(f"malformed token: {exc}") from None
    return header, claims


def to_json(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True)

"""``magnetar tokens`` and ``magnetar smart-city`` as click commands: the same flags, defaults,
exclusive choices and exit codes as their argparse versions had (no broker needed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from magnetar.demo.smart_city.cli import smart_city
from magnetar.demo.smart_city.settings import CitySettings

from .conftest import magnetar


def ok(*args: str, stdin: str | None = None) -> str:
    done = magnetar(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_tokens_secret_key_token_show_and_validate(tmp_path: Path):
    key = tmp_path / "secret.key"
    ok("tokens", "create-secret-key", "-o", str(key))
    assert len(key.read_bytes()) == 32 and key.stat().st_mode & 0o777 == 0o600
    token = ok("tokens", "create", "-sk", f"file://{key}", "-s", "alice", "-e", "1h").strip()
    assert '"sub": "alice"' in ok("tokens", "show", token)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    assert '"sub": "alice"' in ok(
        "tokens", "validate", "--token-file", str(token_file), "--secret-key", str(key)
    )

    other = tmp_path / "other.key"
    ok("tokens", "create-secret-key", "--output", str(other))
    refused = magnetar("tokens", "validate", token, "-sk", str(other))
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == "Error: the token's signature does not verify"


def test_tokens_key_pair_es256(tmp_path: Path):
    private, public = tmp_path / "k.der", tmp_path / "k.pub"
    ok(
        "tokens",
        "create-key-pair",
        "-a",
        "ES256",
        "--output-private-key",
        str(private),
        "--output-public-key",
        str(public),
    )
    token = ok("tokens", "create", "--private-key", str(private), "--subject", "bob").strip()
    claims = ok("tokens", "validate", token, "-pk", str(public), "--token-public-alg", "ES256")
    assert '"sub": "bob"' in claims


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["create", "-s", "x"], ["-sk/--secret-key", "-pk/--private-key", "neither"]),
        (["create", "-s", "x", "-sk", "a", "-pk", "b"], ["-sk/--secret-key", "both"]),
        (["validate", "t"], ["-sk/--secret-key", "-pk/--public-key"]),
        (["create", "-sk", "a"], ["--subject"]),
        (["create-secret-key", "-a", "RS256"], ["HS256"]),
        (["create-key-pair", "--output-public-key", "p"], ["--output-private-key"]),
        ([], ["create-secret-key"]),
    ],
)
def test_tokens_usage_errors_exit_2_and_name_the_flags(args, words):
    done = magnetar("tokens", *args)
    assert done.returncode == 2
    assert all(word in done.stderr for word in words), done.stderr


def test_tokens_without_a_token_anywhere_is_one_line(monkeypatch):
    monkeypatch.delenv("TOKEN", raising=False)
    done = magnetar("tokens", "show")
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: give the token as an argument, with --token-file, or in $TOKEN"


def test_smart_city_has_a_flag_per_setting_with_its_default():
    options = {opt: param for param in smart_city.params for opt in param.opts}
    for field in dataclasses.fields(CitySettings):
        flag = "--" + field.name.replace("_", "-")
        assert flag in options, flag
        assert options[flag].default is None  # not given: the dataclass's default stands
    assert options["--log-level"].default == "WARNING"
    help_text = ok("smart-city", "--help")
    assert "--vehicles-per-area INTEGER" in help_text and "(default 8)" in help_text
    assert "--secure" in help_text


def test_smart_city_flags_become_settings():
    values = {"vehicles_per_area": 3, "duration_s": 5.0, "secure": True, "areas": None, "quiet": None}
    settings = CitySettings.from_values(values)
    assert (settings.vehicles_per_area, settings.duration_s, settings.secure) == (3, 5.0, True)
    assert settings.areas == CitySettings().areas and settings.quiet is False


def test_smart_city_bad_settings_are_usage_errors():
    done = magnetar("smart-city", "--areas", "2", "--damaged-areas", "3")
    assert done.returncode == 2
    assert "damaged_areas <= areas" in done.stderr
    assert magnetar("smart-city", "--areas", "many").returncode == 2

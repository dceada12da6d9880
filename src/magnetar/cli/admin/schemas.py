"""``magnetar admin schemas``: pulsar-admin's schemas verbs (get, upload, delete, compatibility).

A schema file is pulsar-admin's: JSON ``{"type": "AVRO", "schema": "<definition>", "properties": {}}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from magnetar.cli.admin.common import done, json_option, pass_admin, print_json, print_mapping, print_table
from magnetar.client.admin import AdminClient

_FILE = click.option(
    "-f",
    "--filename",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='The schema as JSON: {"type": ..., "schema": ..., "properties": {...}}.',
)

_COLUMNS = ("version", "type", "timestamp", "properties", "data")


def read_schema_file(path: Path) -> dict[str, Any]:
    """The upload payload in ``path``; click.BadParameter (exit 2) for a file that is not one."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--filename") from None
    if not isinstance(payload, dict) or "type" not in payload:
        raise click.BadParameter(f'{path}: expected {{"type": ..., "schema": ...}}', param_hint="--filename")
    return payload


@click.group("schemas")
def schemas() -> None:
    """A topic's schema: get, upload, delete, test compatibility."""


@schemas.command("get")
@click.argument("topic")
@click.option("-v", "--version", type=int, help="This version rather than the latest.")
@click.option(
    "-a", "--all-version", "all_versions", is_flag=True, help="Every version since the last delete."
)
@json_option
@pass_admin
def get_schema(
    admin: AdminClient, topic: str, version: int | None, all_versions: bool, as_json: bool
) -> None:
    """The topic's latest schema (or one version, or all)."""
    if all_versions:
        found = admin.schemas.get_all(topic)
        if as_json:
            print_json(found)
        else:
            print_table(_COLUMNS, ([s.get(c) for c in _COLUMNS] for s in found), as_json=False)
        return
    print_mapping(admin.schemas.get(topic, version), as_json)


@schemas.command("upload")
@click.argument("topic")
@_FILE
@json_option
@pass_admin
def upload_schema(admin: AdminClient, topic: str, filename: Path, as_json: bool) -> None:
    """Register a schema for the topic (refused, exit 4, if incompatible)."""
    version = admin.schemas.upload(topic, read_schema_file(filename))
    if as_json:
        print_json({"version": version})
    done(f"Uploaded schema version {version} of {topic}")


@schemas.command("delete")
@click.argument("topic")
@json_option
@pass_admin
def delete_schema(admin: AdminClient, topic: str, as_json: bool) -> None:
    """Delete the topic's schema (its versions stay in the history)."""
    version = admin.schemas.delete(topic)
    if as_json:
        print_json({"version": version})
    done(f"Deleted the schema of {topic}")


@schemas.command("compatibility")
@click.argument("topic")
@_FILE
@json_option
@pass_admin
def test_compatibility(admin: AdminClient, topic: str, filename: Path, as_json: bool) -> None:
    """Whether a schema could be uploaded, under the namespace's compatibility strategy."""
    print_mapping(admin.schemas.test_compatibility(topic, read_schema_file(filename)), as_json)

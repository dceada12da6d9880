"""A benchmark's JSON document: printed for whoever runs it, and written to ``--out`` when given."""

from __future__ import annotations

import json
from pathlib import Path


def emit(document: object, out: Path | None) -> str:
    """Print ``document`` as indented JSON and write the same text to ``out`` (if any); the text."""
    text = json.dumps(document, indent=2)
    print(text)
    if out is not None:
        out.write_text(text + "\n")
    return text

"""Files and directories the metadata store cannot account for are moved aside, never deleted.

A broker deletes data only through retention, an explicit admin call, or a repair the operator
runs. What recovery finds that none of those explains (a managed-ledger directory, a segment
or cursor-ledger file no row owns) goes to ``<data dir>/orphaned/`` under its own name and the
time it was moved, with a warning, so the operator can look at it, move it back and run
``magnetar repair``, or delete it.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from magnetar.storage.segment import fsync_directory

log = logging.getLogger(__name__)

ORPHANED_DIR = "orphaned"


def move_aside(data_dir: Path, path: Path, reason: str) -> Path:
    """Move ``path`` (a file or directory inside ``data_dir``) to ``data_dir/orphaned/`` and log it.

    The new name keeps the path relative to the data dir (``/`` becomes ``+``) and adds the
    time, so moves from different places or different starts never collide.
    """
    target_dir = Path(data_dir) / ORPHANED_DIR
    created = not target_dir.exists()
    target_dir.mkdir(exist_ok=True)
    relative = path.relative_to(data_dir).as_posix().replace("/", "+")
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = target_dir / f"{relative}-{stamp}"
    n = 1
    while target.exists():
        n += 1
        target = target_dir / f"{relative}-{stamp}-{n}"
    os.rename(path, target)
    fsync_directory(target_dir)
    fsync_directory(path.parent)
    if created:
        fsync_directory(target_dir.parent)
    log.warning("moved %s aside to %s: %s (nothing was deleted)", path, target, reason)
    return target

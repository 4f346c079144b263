"""Who holds an embedded vector folder: a small record kept beside the folder's lock.

A lock on the folder lets one process open it but cannot say who holds it. The process
that gets the lock writes this record; a process that is refused reads it to name the
holder. The lock decides and the record only names: a record left by a process that died
is overwritten by the next owner and never blocks anyone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORD_NAME = ".tiermem-owner.json"  # inside the folder, next to the lock file


@dataclass(frozen=True)
class FolderOwner:
    pid: int
    hostname: str
    argv: list[str] = field(default_factory=list)
    started_at: str = ""

    @classmethod
    def this_process(cls) -> FolderOwner:
        return cls(
            pid=os.getpid(),
            hostname=socket.gethostname(),
            argv=list(sys.argv),
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )

    @property
    def command(self) -> str:
        words = [Path(self.argv[0]).name, *self.argv[1:]] if self.argv else []
        return " ".join(words)[:200]

    def is_this_process(self) -> bool:
        return self.pid == os.getpid() and self.hostname == socket.gethostname()

    def is_gone(self) -> bool:
        """True when the process is known to be dead (only knowable on this host)."""
        if self.hostname != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False

    def describe(self) -> str:
        parts = [f"pid {self.pid} on host {self.hostname}"]
        if self.command:
            parts.append(f"`{self.command}`")
        if self.started_at:
            parts.append(f"since {self.started_at}")
        return ", ".join(parts)


def record_path(folder: str | Path) -> Path:
    return Path(folder) / RECORD_NAME


def write_owner(folder: str | Path) -> FolderOwner:
    """Name this process as the folder's holder (call with the folder's lock held)."""
    owner = FolderOwner.this_process()
    target = record_path(folder)
    scratch = target.with_name(f"{RECORD_NAME}.{owner.pid}.tmp")
    scratch.write_text(json.dumps(asdict(owner)), encoding="utf-8")
    os.replace(scratch, target)  # a reader sees the old record or the new one, never half
    return owner


def read_owner(folder: str | Path) -> FolderOwner | None:
    try:
        raw: dict[str, Any] = json.loads(record_path(folder).read_text(encoding="utf-8"))
        return FolderOwner(
            pid=int(raw["pid"]),
            hostname=str(raw["hostname"]),
            argv=[str(a) for a in raw.get("argv", [])],
            started_at=str(raw.get("started_at", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear_owner(folder: str | Path) -> None:
    """Remove the record if it still names this process (a later owner's stays)."""
    owner = read_owner(folder)
    if owner is not None and owner.is_this_process():
        with contextlib.suppress(OSError):
            record_path(folder).unlink()


def describe_holder(folder: str | Path) -> tuple[str, dict[str, Any]]:
    """Who holds the folder, in words and as details, for a refused open."""
    owner = read_owner(folder)
    if owner is None or owner.is_gone():
        return (
            "another process that left no owner record (one still starting, or a record "
            "removed by hand)",
            {},
        )
    if owner.is_this_process():
        return "another vector store in this same process", asdict(owner)
    return owner.describe(), asdict(owner)

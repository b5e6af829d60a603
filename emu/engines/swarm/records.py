"""Copy a task's records out of its container, through its node's engine, into the host's folder.

On a swarm of several nodes no host folder is shared with the tasks: each agent writes /records
in its own container, and the host copies the folder out (`get_archive`) once the agent has
stopped (it flushes on SIGTERM), before the service is removed (restart policy none keeps a
finished task's container until then). The copy lands where a plain cluster's bind mount would
have put the files, so emu.run.tables reads them as on one host.
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO, Any

from emu.agent.config import RECORDS_DIR

CHUNK = 1024 * 1024  # bytes of the engine's tar stream read at a time


class RecordsTooLarge(RuntimeError):
    """A task's records pass the limit the copy was given."""


def copy_records(api: Any, container: str, destination: Path, limit: int | None = None) -> int:
    """Extract the container's RECORDS_DIR into `destination`; the bytes copied (0 when the
    container has no such folder). The engine's tar stream goes to an unnamed file beside the
    destination a chunk at a time, never whole into memory, and stops past `limit` bytes
    (RecordsTooLarge); members are extracted with tarfile's "data" filter: no absolute paths,
    links out of the folder, or devices."""
    from docker.errors import NotFound

    try:
        stream, _ = api.get_archive(container, RECORDS_DIR, chunk_size=CHUNK)
    except NotFound:
        return 0
    destination.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=destination.parent) as spool:
        copied = 0
        for chunk in stream:
            copied += len(chunk)
            if limit is not None and copied > limit:
                raise RecordsTooLarge(f"the records of container {container[:12]} pass "
                                      f"{limit / 1024**2:.1f} MiB: not copied to {destination}")
            spool.write(chunk)
        spool.seek(0)
        _extract(spool, destination)
    return copied


def _extract(spool: IO[bytes], destination: Path) -> None:
    top = PurePosixPath(RECORDS_DIR).name
    with tarfile.open(fileobj=spool, mode="r") as archive:
        members = []
        for member in archive.getmembers():
            parts = PurePosixPath(member.name).parts
            if not parts or parts[0] != top or len(parts) == 1:
                continue
            member.name = str(PurePosixPath(*parts[1:]))
            members.append(member)
        archive.extractall(destination, members=members, filter="data")

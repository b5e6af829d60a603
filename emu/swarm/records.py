"""Copy a task's records out of its container, through its node's engine, into the host's folder.

On a swarm of several nodes no host folder is shared with the tasks: each agent writes /records
in its own container, and the host copies the folder out (`get_archive`) once the agent has
stopped (it flushes on SIGTERM), before the service is removed (restart policy none keeps a
finished task's container until then). The copy lands where a plain cluster's bind mount would
have put the files, so emu.tables reads them as on one host.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from emu.agent.config import RECORDS_DIR


def copy_records(api: Any, container: str, destination: Path) -> int:
    """Extract the container's RECORDS_DIR into `destination`; the bytes copied (0 when the
    container has no such folder). Members are extracted with tarfile's "data" filter: no
    absolute paths, links out of the folder, or devices."""
    from docker.errors import NotFound

    try:
        stream, _ = api.get_archive(container, RECORDS_DIR)
    except NotFound:
        return 0
    buffer = io.BytesIO()
    for chunk in stream:
        buffer.write(chunk)
    buffer.seek(0)
    top = PurePosixPath(RECORDS_DIR).name
    destination.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buffer, mode="r") as archive:
        members = []
        for member in archive.getmembers():
            parts = PurePosixPath(member.name).parts
            if not parts or parts[0] != top or len(parts) == 1:
                continue
            member.name = str(PurePosixPath(*parts[1:]))
            members.append(member)
        archive.extractall(destination, members=members, filter="data")
    return buffer.getbuffer().nbytes

"""Import a root filesystem's tarball as an image of a Docker Engine: the base image that
foglab's images are built on (emu.images builds the tarball and calls this)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import docker


def import_tarball(client: docker.DockerClient, data: BinaryIO, repository: str, tag: str,
                   changes: Sequence[str] = ()) -> None:
    """`repository:tag` made from the tarball `data` reads, with the Dockerfile `changes`
    (LABEL, ...) applied. The engine tags the image only once the whole tarball is in: no
    half image."""
    client.api.import_image(src=data, repository=repository, tag=tag, changes=list(changes))

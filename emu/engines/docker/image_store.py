"""foglab's images in a Docker Engine: found by the tag of their inputs (emu.images), else built:
the base rootfs (emu.rootfs) imported as an image once per architecture and package set, the
project's files committed on it."""

from __future__ import annotations

import contextlib
import fcntl
import io
import tarfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from emu.images import (
    CACHE_DIR,
    PROJECT_ROOT,
    TAG_DIGITS,
    ImageSpec,
    base_key,
    compiled_files,
    image_config,
    image_files,
    input_hash,
)
from emu.rootfs.build import Progress, build_tarball

if TYPE_CHECKING:
    import docker

# Importing a big rootfs keeps the engine busy before it answers.
DOCKER_TIMEOUT_S = 900


@dataclass(frozen=True)
class BuiltImage:
    """An image ready in the engine, and whether it was there already."""

    tag: str
    id: str
    cached: bool


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on path: builds of one base, in any process, wait in turn."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _archive(files: list[tuple[str, Path]], extra: list[tuple[str, bytes]] = ()) -> bytes:
    """The files (and extra contents) as a tar archive, owned by root; the engine makes the
    folders they need."""
    buffer = io.BytesIO()
    contents = [(path, source.read_bytes()) for path, source in files] + list(extra)
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, data in contents:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def import_tarball(client: docker.DockerClient, data: BinaryIO, repository: str, tag: str,
                   changes: Sequence[str] = ()) -> None:
    """`repository:tag` made from the tarball `data` reads, with the Dockerfile `changes`
    (LABEL, ...) applied. The engine tags the image only once the whole tarball is in: no
    half image."""
    client.api.import_image(src=data, repository=repository, tag=tag, changes=list(changes))


class _ReadProgress(io.FileIO):
    """A file that reports how much of it has been read, in whole percents."""

    def __init__(self, path: Path, progress: Progress):
        super().__init__(path, "rb")
        self.total = max(path.stat().st_size, 1)
        self.done = 0
        self.reported = -1
        self.progress = progress

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.done += len(data)
        percent = self.done * 100 // self.total
        if percent > self.reported:
            self.reported = percent
            self.progress("import", percent / 100)
        return data


def _find(client: docker.DockerClient, tag: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        return client.images.get(tag).id
    except ImageNotFound:
        return None


def _base_image(client: docker.DockerClient, spec: ImageSpec, cache_dir: Path,
                progress: Progress) -> str:
    """The base rootfs as an image, imported from its cached tarball, built first if need be.

    Every image of one base shares its layer: a change of project files adds a small layer,
    not another copy of the rootfs.
    """
    key = base_key(spec)
    repository = f"foglab/base-{spec.arch}"
    tag = f"{repository}:{key}"
    if _find(client, tag):
        return tag
    tarball = cache_dir / f"base-{spec.arch}-{key}.tar"
    if not tarball.exists():
        build_tarball(spec.recipe, tarball, progress)
    with _ReadProgress(tarball, progress) as data:
        # The engine tags the image only once the whole tarball is in: no half image.
        import_tarball(client, data, repository, key,
                       # Inherited: every image says which base it is built on.
                       changes=[f"LABEL foglab=1 foglab.base={tag}"])
    return tag


def _commit(client: docker.DockerClient, spec: ImageSpec, base: str, root: Path, inputs: str,
            progress: Progress) -> None:
    """Add the spec's files to base in a container never started, and commit it as the image."""
    import secrets

    from docker.errors import NotFound

    progress("sources", None)
    # Named before it exists: a Ctrl-C while the engine creates it, before its id comes back,
    # still finds it by name to remove it.
    name = f"foglab-build-{spec.name}-{secrets.token_hex(4)}"
    try:
        container = client.containers.create(base, ["/bin/true"], name=name,
                                             labels={"foglab": "1"})
        files = image_files(spec, root)
        container.put_archive("/", _archive(files, compiled_files(files)))
        progress("commit", None)
        container.commit(repository=spec.repository, tag=inputs[:TAG_DIGITS],
                         changes=[*image_config(spec), f"LABEL foglab.inputs={inputs}"])
    finally:
        with contextlib.suppress(NotFound):  # never made
            client.containers.get(name).remove(force=True)


def ensure_image(spec: ImageSpec, *, root: Path = PROJECT_ROOT, cache_dir: Path = CACHE_DIR,
                 client: docker.DockerClient | None = None,
                 progress: Progress = lambda stage, fraction: None) -> BuiltImage:
    """The image for spec's current inputs: found by its tag, else built.

    The base rootfs (debootstrap, apt, pip) is cached per architecture and package set, as a
    tarball in cache_dir and as an image, so a change of project files costs a commit.
    `progress` hears the stages lookup, then for a build debootstrap, apt, pip wheels,
    pip install, pack (without a cached tarball), import (without a base image), sources,
    commit and done.
    A client of the caller's own needs a timeout as long as an import: DOCKER_TIMEOUT_S.
    """
    import docker

    client = client or docker.from_env(timeout=DOCKER_TIMEOUT_S)
    inputs = input_hash(spec, root)
    tag = f"{spec.repository}:{inputs[:TAG_DIGITS]}"
    progress("lookup", None)
    if found := _find(client, tag):
        return BuiltImage(tag, found, cached=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / f"base-{base_key(spec)}.lock"):
        if found := _find(client, tag):  # built by another process while we waited
            return BuiltImage(tag, found, cached=True)
        base = _base_image(client, spec, cache_dir, progress)
        _commit(client, spec, base, root, inputs, progress)
    progress("done", 1.0)
    return BuiltImage(tag, client.images.get(tag).id, cached=False)

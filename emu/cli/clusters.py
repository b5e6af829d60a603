"""How the `foglab emu` commands reach a cluster and an experiment: the --cluster option, this
host's engine (or a swarm's engines as one), the cluster a command means, and the experiment
loader the experiment layer hands over. emu.cli.main and emu.cli.apply_command both read these."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from topologies.errors import SpecError
from topologies.exit_codes import ExitCode
from topologies.terminal import error, refuse

# How `--experiment` and `emu migrate` load an experiment file: the experiment layer hands its
# loader over as it mounts these commands (emu imports nothing of it).
_experiments: list[Callable[[str, list[str]], tuple[Path, Any]]] = []


def use_experiments(load: Callable[[str, list[str]], tuple[Path, Any]]) -> None:
    """Take `load(experiment, sets)`: the experiment (a file or catalog name) with its --set
    options, checked as an emu run: its file and the loaded experiment (`.file`, `.points`),
    or a SpecError."""
    _experiments[:] = [load]


def load_experiment(experiment: str, sets: list[str]) -> tuple[Path, Any]:
    """The experiment as the loader handed over (use_experiments) loads it."""
    if not _experiments:
        raise SpecError((), experiment, "an experiment loaded through `foglab` (these "
                        "commands were mounted without the experiment layer)")
    return _experiments[0](experiment, sets)


def cluster_name(name: str | None) -> str | None:
    """A --cluster that no cluster can have is refused before Docker is asked (exit 3)."""
    from emu.cluster.names import CLUSTER_NAME

    if name is not None and not CLUSTER_NAME.match(name):
        refuse(f"--cluster {name!r}: a cluster name Docker accepts: letters, digits, _ . or -, "
               "starting with a letter or digit, at most 40 characters")
    return name


ClusterOption = Annotated[str | None, typer.Option(
    "--cluster", callback=cluster_name,
    help="the cluster's name (default: the only cluster there is)")]


def docker_client():
    """This host's engine; with a multi-node swarm named in the environment
    (FOGLAB_SWARM_ENGINES, emu.engines.swarm.target), every node's engine as one client, so `down`,
    `status` and `exec` find a cluster's containers on whichever node runs them."""
    from emu.engines.swarm.target import current_target

    try:
        target = current_target()
    except ValueError as failure:
        refuse(str(failure))
    try:
        import docker

        from emu.engines.docker.image_store import DOCKER_TIMEOUT_S

        if target is not None:
            from emu.engines.swarm.engine import routed_client

            return routed_client(target)
        return docker.from_env(timeout=DOCKER_TIMEOUT_S, max_pool_size=24)
    except Exception as failure:  # noqa: BLE001 - whatever keeps the SDK from the engine
        error(f"no Docker Engine: {failure}", hint="foglab emu doctor --fix")
        raise typer.Exit(ExitCode.FAILURE) from None


def which_cluster(client, name: str | None) -> str:
    """The named cluster, or the only one there is."""
    from emu.engines.docker import inventory

    found = inventory.clusters(client)
    if name is not None:
        if name not in found:
            error(f"no cluster {name!r}; clusters: {', '.join(found) or 'none'}")
            raise typer.Exit(ExitCode.FAILURE)
        return name
    if len(found) != 1:
        error("no cluster is up" if not found else
              f"{len(found)} clusters are up ({', '.join(found)}): choose one with --cluster")
        raise typer.Exit(ExitCode.FAILURE)
    return next(iter(found))


def reach_cluster(cluster: str | None, code: int):
    """A running cluster's agents as a command reaches them: (the engine's client, the
    cluster's name, its agents, each broker's address, each node's kind, the login to them;
    emu.live.agents); exit `code` when this user may not log in to it."""
    from emu.live.agents import agents_and_brokers, cluster_login

    client = docker_client()
    name = which_cluster(client, cluster)
    agents, brokers, kinds = agents_and_brokers(client, name)
    try:
        login = cluster_login(client, name)
    except PermissionError as refused:
        error(refused)
        raise typer.Exit(code) from None
    return client, name, agents, brokers, kinds, login

"""An `engine: spark` operator: the PySpark job (`workloads.spark.job`) as a child process, and
the cloud VM's steps when such a query moves to another cloud VM.

Only the cloud image has Spark. The job reads the operator's topic filter through its own
broker session, so the agent meanwhile records each message's arrival at the node as a sink
does (see Agent): the messages table measures delivery to the node where Spark reads, and the
job's own micro-batch progress (`<records>/<work>/progress.jsonl`) measures Spark.

Moving a query (the host drives it: emu.features.moves.spark_query; workloads.spark.migration says
how a job hands over) takes these migration steps, requests answered as the other steps are
(emu.agent.management):

- `migrate.spark.status`: the node's jobs of an operator (work directory, whether it runs the
  operator's query or is a standby, alive, exit code, broker session), the operator's config,
  and the input session of its arrival recorder, if it has one of its own.
- `migrate.spark.standby` (target): starts a standby job for the config and the source's broker
  session (warm: Spark up, the app run once), in a fresh work directory `<operator>.<n>`
  under the records, as a query may come back to a node it left, whose old directory keeps
  that query's journal, checkpoint and sink. A standby already there for the session is
  answered instead.
- `migrate.spark.release`: to the target, its standby (which took the handover) now runs the
  operator's query; to the source, its job (stopped for the move) no longer does; with `abort`,
  the target stops its standby.
- `migrate.spark.rollback` (source): starts its stopped job again in its work directory, once
  the old process has exited and the move's files the host names (`clear`: its stop request and
  records) are gone: it continues on its checkpoint, journal and broker session, which held the
  input meanwhile. Answered once the job is started (its query then takes a cold
  start: the held input waits that long, and none is lost).

On a Spark standalone cluster (`master`: `spark://host:port`, emu.agent.spark_cluster runs the
master and workers on the cloud VMs a topology names), the job is the driver: executors on the
workers connect back to it at the node's address on DRIVER_PORT and BLOCK_MANAGER_PORT (fixed,
so a container network that filters lets them through), and its `--work` must be on a volume
every Spark VM mounts at the same path (the journal is read by path on the executors).

The host writes the stop request into the source's work directory and copies the handover into
the target's itself (each node's records folder is mounted on the host): in a deployment on
real VMs, that is a copy from one VM to the other.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu.agent.config import OperatorConfig
from emu.agent.migration import Migrations
from emu.agent.operators import operator_config
from emu.agent.protocol import operator_name
from workloads.operator_engines import OPERATOR_ENGINES, Move

if TYPE_CHECKING:
    from emu.agent.parts import AgentSurface

APPS = ("etl", "stats", "pred")
STOP_WAIT_S = 15.0
# A job stopped for a move exits once its Spark session is down: a rollback waits this long.
EXIT_WAIT_S = 60.0
# A standby's warm-up: messages run through the app, in batches. A cloud VM's batches hold tens
# of messages at the emulation's rates; three batches compile the plan, start the Python
# workers and run the state's code paths, and the job's default (3,000) took minutes on a
# loaded two-core host.
WARMUP_MESSAGES, WARMUP_BATCHES = 300, 3
# A driver's ports on a standalone cluster: executors connect to them.
DRIVER_PORT, BLOCK_MANAGER_PORT = 7337, 7338


def unblock_stop_signals() -> None:
    """A child's first step (preexec_fn): the agent blocks its stop signals for sigwait, and a
    child inherits the mask."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})


def session_of(operator: str, node: str) -> str:
    """The broker session of the operator's query started on `node`; a moved query keeps
    the session it started with."""
    return f"foglab-spark-{operator}-{node}"


def job_environment() -> dict[str, str]:
    """A Spark job's environment: the agent's, and on a closed cluster the node's MQTT login,
    which the job's clients log in with (workloads.spark.login)."""
    from emu.agent.mqtt import credentials
    from workloads.spark.login import LOGIN_VARIABLE

    environment = os.environ.copy()
    login = credentials()
    if login is not None:
        environment[LOGIN_VARIABLE] = ":".join(login)
    return environment


class SparkJob:
    """The job of one operator in `<records>/<work>` (default: the operator's name); `stop`
    ends it with SIGTERM (the job stops its query).

    `dilation`: the run's K (AgentConfig.dilation): the job's trigger and Spark's timers are
    scaled by it (`--dilation`, workloads.spark.session.dilated_conf); the waits for it to
    stop or exit (STOP_WAIT_S, EXIT_WAIT_S) too, as a batch boundary comes K times later.

    `standby`: started warm, waiting for a handover (`--standby`); `active`: the operator's
    query runs (or ran) in this job. A job that took over a query is made active by release.

    `master`: a standalone cluster's `spark://host:port` instead of local[`cores`]; the
    executors reach the driver at `driver_host` (the node's address on the cluster's network).
    """

    def __init__(self, config: OperatorConfig, node: str, mqtt: str, records: str,
                 cores: int = 2, standby: bool = False, client_id: str | None = None,
                 work: str | None = None, dilation: float = 1.0, master: str | None = None,
                 driver_host: str | None = None) -> None:
        if config.task not in APPS:
            raise ValueError(f"operator {config.name!r}: engine spark runs the apps "
                             f"{', '.join(APPS)}, not {config.task!r}")
        if len(config.reads) != 1:
            raise ValueError(f"operator {config.name!r}: a Spark job reads one topic filter, "
                             f"not {config.reads}")
        self.name = config.name
        self.config = config
        self.work = Path(records) / (work or config.name)
        self.client_id = client_id or session_of(config.name, node)
        self.standby = standby
        self.active = not standby
        self.dilation = dilation
        self._command = [sys.executable, "-m", "workloads.spark.job", "--app", config.task,
                         "--mqtt", mqtt, "--reads", config.reads[0], "--work", str(self.work),
                         "--master", master or f"local[{cores}]",
                         "--params", json.dumps(config.params), "--client-id", self.client_id]
        if master:
            self._command += _cluster_args(config.name, master, driver_host)
        if config.writes:
            self._command += ["--writes", f"{config.writes}/{node}"]
        if dilation != 1:
            self._command += ["--dilation", repr(float(dilation))]
        self.process: subprocess.Popen | None = None

    @property
    def command(self) -> list[str]:
        # A standby given the source's session builds the query for a checkpoint handover
        # before it comes (workloads.spark.migration); started again, the job resumes.
        if not self.standby:
            return self._command
        return self._command + ["--standby", "--warmup-messages", str(WARMUP_MESSAGES),
                                "--warmup-batches", str(WARMUP_BATCHES)]

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        with (self.work / "job.log").open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            preexec_fn=unblock_stop_signals, env=job_environment())

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = STOP_WAIT_S) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` (emulated s); the job's exit code."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.terminate()
        try:
            return self.process.wait(timeout * self.dilation)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def describe(self) -> dict[str, Any]:
        return {"work": self.work.name, "active": self.active, "standby": self.standby,
                "alive": self.alive(), "client_id": self.client_id,
                "returncode": None if self.process is None else self.process.poll()}


class SparkMigrations(Migrations):
    """A cloud VM's migration steps: a Spark query's (`migrate.spark.*`, see the module
    docstring) and an operator instance's (emu.agent.migration). On the scheduler thread."""

    def __init__(self, agent: AgentSurface) -> None:
        super().__init__(agent)
        self._steps: dict[str, Callable[[dict[str, Any], Callable[..., None]], None]] = {
            "migrate.spark.status": self._spark_status,
            "migrate.spark.standby": self._spark_standby,
            "migrate.spark.release": self._spark_release,
            "migrate.spark.rollback": self._spark_rollback}

    def handle(self, command: str, args: dict[str, Any], answer: Callable[..., None]) -> None:
        step = self._steps.get(command)
        if step is None:
            super().handle(command, args, answer)
        else:
            step(args, answer)

    def _jobs(self, name: str) -> list[SparkJob]:
        return [job for job in self.agent.spark_jobs.values() if job.name == name]

    def _job(self, args: dict[str, Any], **wanted: bool) -> SparkJob:
        name = operator_name(args)
        work = args.get("work")
        jobs = [job for job in self._jobs(name) if (work is None or job.work.name == work)
                and all(getattr(job, key) == value for key, value in wanted.items())]
        if len(jobs) != 1:
            known = ", ".join(f"{job.work.name} ({job.describe()})" for job in self._jobs(name))
            raise ValueError(f"{len(jobs)} Spark jobs of {name!r} on {self.agent.node} match "
                             f"{ {'work': work, **wanted} }; its jobs: {known or 'none'}")
        return jobs[0]

    def _spark_status(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        name = operator_name(args)
        jobs = self._jobs(name)
        recorder = self.agent.sessions.get(name)
        answer({"node": self.agent.node, "jobs": [job.describe() for job in jobs],
                "config": asdict(jobs[0].config) if jobs else None,
                "recorder_session": recorder.client_id if recorder is not None else None,
                "t": self.agent.clock()})

    def _spark_standby(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        config = args.get("config")
        client_id = args.get("client_id")
        if not isinstance(config, dict):
            raise ValueError("a standby needs 'config', the operator's OperatorConfig")
        if not isinstance(client_id, str) or not client_id:
            raise ValueError("a standby needs 'client_id', the source's broker session")
        config = operator_config(config)
        engine = OPERATOR_ENGINES.get(config.engine)
        if engine is None or engine.moves_by is not Move.STANDBY:
            raise ValueError(f"operator {config.name!r} runs on engine {config.engine}, not "
                             "spark")
        for job in self._jobs(config.name):
            if job.standby and job.alive() and job.client_id == client_id:
                answer({"work": job.work.name, "t": agent.clock(), "started": False})
                return
        records = Path(agent.config.records)
        number = 1
        while (records / f"{config.name}.{number}").exists() or (
                f"{config.name}.{number}" in agent.spark_jobs):
            number += 1
        work = f"{config.name}.{number}"
        job = SparkJob(config, agent.node, agent.config.mqtt, agent.config.records,
                       len(os.sched_getaffinity(0)), standby=True, client_id=client_id,
                       work=work, dilation=agent.config.dilation)
        agent.spark_jobs[work] = job
        job.start()
        answer({"work": work, "t": agent.clock(), "started": True})

    def _spark_release(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        agent = self.agent
        if args.get("abort"):
            jobs = [job for job in self._jobs(operator_name(args)) if job.standby
                    and args.get("work") in (None, job.work.name)]
            for job in jobs:
                del agent.spark_jobs[job.work.name]
                threading.Thread(target=job.stop, daemon=True).start()
            answer({"t": agent.clock(), "dropped": [job.work.name for job in jobs]})
            return
        role = args.get("role")
        if role == "target":
            job = self._job(args, standby=True)
            job.standby, job.active = False, True
        elif role == "source":
            job = self._job(args, active=True)
            job.active = False
        else:
            raise ValueError(f"'role' must be 'source' or 'target', not {role!r}")
        answer({"t": agent.clock(), "work": job.work.name})

    def _spark_rollback(self, args: dict[str, Any], answer: Callable[..., None]) -> None:
        job = self._job(args, active=True)
        agent = self.agent
        clear = args.get("clear", [])
        if not isinstance(clear, list) or not all(
                isinstance(name, str) and name and Path(name).name == name and name != ".."
                for name in clear):
            raise ValueError(f"'clear' names files of the job's work directory, not {clear!r}")

        def restart() -> None:
            # Off the scheduler thread: the stopped job may take seconds to leave.
            try:
                if job.process is not None:
                    try:
                        job.process.wait(EXIT_WAIT_S * job.dilation)
                    except subprocess.TimeoutExpired:
                        job.process.kill()
                        job.process.wait()
                for name in clear:
                    (job.work / name).unlink(missing_ok=True)
                job.standby = False
                job.start()
            except Exception as error:  # noqa: BLE001 - answered, never kills the agent
                agent.scheduler.call(answer, None, f"{type(error).__name__}: {error}")
                return
            agent.scheduler.call(answer, {"t": agent.clock(), "work": job.work.name})

        threading.Thread(target=restart, name="foglab-spark-rollback", daemon=True).start()


def _cluster_args(operator: str, master: str, driver_host: str | None) -> list[str]:
    """The job's options for a driver on `master` (checked here: the agent refuses a bad
    URL when it starts, not the job minutes later)."""
    from workloads.spark.session import master_hosts

    try:
        on_cluster = bool(master_hosts(master))
    except ValueError as error:
        raise ValueError(f"operator {operator!r}: {error}") from None
    if not on_cluster:
        raise ValueError(f"operator {operator!r}: a cluster master is spark://host:port, "
                         f"not {master!r}")
    if not driver_host:
        raise ValueError(f"operator {operator!r}: a driver on {master} needs the node's "
                         "address the workers reach (driver_host)")
    return ["--driver-host", driver_host, "--bind-address", "0.0.0.0",
            "--driver-port", str(DRIVER_PORT), "--block-manager-port", str(BLOCK_MANAGER_PORT)]

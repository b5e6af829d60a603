"""A Ctrl-C at any moment of `Cluster.up` (the shaper's probe, the image checks, a network's
creation, the containers' start, the zygote's start, the wait for services) leaves nothing:
no container, network, relay, zygote socket or scratch folder."""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from emu.engines.docker.engine import Cluster
from tests.emu_cluster.test_cluster import leftovers, new_plan

pytestmark = [pytest.mark.emu, pytest.mark.slow]

# (the stage whose first report arms the interrupt, seconds after it): each lands inside the
# call that follows that report.
MOMENTS = [("shaper", 0.0), ("image", 0.0), ("image", 0.05), ("networks", 0.0),
           ("containers", 0.0), ("zygote", 0.0), ("zygote", 0.5), ("ready", 0.0)]


@pytest.mark.parametrize(("stage", "delay"), MOMENTS)
def test_a_ctrl_c_at_any_moment_of_up_leaves_nothing(client, stage: str, delay: float) -> None:
    plan = new_plan()
    main = threading.main_thread().ident
    timers: list[threading.Timer] = []
    seen: list[str] = []

    def progress(reported: str, done: int, total: int, detail: str) -> None:
        seen.append(reported)
        if reported == stage and not timers:
            timer = threading.Timer(delay, signal.pthread_kill, (main, signal.SIGINT))
            timers.append(timer)
            timer.start()

    cluster = Cluster(plan, client, progress=progress)
    try:
        with pytest.raises(KeyboardInterrupt):
            cluster.up()
            time.sleep(10)  # up was quicker than the interrupt: it comes here
    finally:
        for timer in timers:
            timer.cancel()
    assert stage in seen, f"up never reached {stage}: {seen}"
    assert leftovers(client, plan.cluster) == ([], [])
    assert list(Path(tempfile.gettempdir()).glob(f"foglab-{plan.cluster}-*")) == []
    assert [t for t in threading.enumerate() if t.name == f"relays-{plan.cluster}"] == []
    assert cluster.links is None or not cluster.links.relays.running

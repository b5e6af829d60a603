"""The netem shaper: its units and netlink message everywhere, the kernel where netem exists."""

import secrets
import subprocess
from collections.abc import Iterator

import pytest

from emu.links.netem import NetemShaper, netem_message, netem_parameters
from emu.links.probe import probe_netem
from emu.links.spec import LinkShape

SHAPE = LinkShape(0.02, jitter_s=0.002, bandwidth_bps=10e6, loss=0.005)


def test_parameters_are_in_pyroute2_units() -> None:
    assert netem_parameters(SHAPE) == {
        "delay": 20_000,
        "jitter": 2_000,
        "loss": pytest.approx(0.5),
        "rate": 1_250_000,
    }


def test_an_unlimited_link_clears_the_rate_and_a_huge_one_is_refused() -> None:
    assert netem_parameters(LinkShape(0.0))["rate"] == 0
    with pytest.raises(ValueError, match="netem rate"):
        netem_parameters(LinkShape(0.0, bandwidth_bps=40e9))


def test_message_carries_the_netem_options_and_no_stray_rate_estimator() -> None:
    pytest.importorskip("pyroute2", reason="pyroute2 is not installed")
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    message = netem_message(3, SHAPE)
    message.encode()
    decoded = tcmsg(message.data)
    decoded.decode()
    assert decoded["index"] == 3
    assert decoded.get_attr("TCA_KIND") == "netem"
    assert decoded.get_attr("TCA_RATE") is None
    options = decoded.get_attr("TCA_OPTIONS")
    assert options["loss"] == pytest.approx(0.005 * (2**32 - 1), rel=1e-6)
    assert options.get_attr("TCA_NETEM_RATE")["rate"] == 1_250_000


@pytest.fixture
def namespace() -> Iterator[str]:
    probe = probe_netem()
    if not probe.available:
        pytest.skip(f"kernel netem is unavailable here: {probe.reason}")
    pytest.importorskip("pyroute2", reason="pyroute2 is not installed")
    name = f"foglab-test-{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)


@pytest.mark.emu
def test_apply_change_and_clear_in_a_namespace(namespace: str) -> None:
    with NetemShaper("lo", namespace) as shaper:
        assert shaper.current() is None
        shaper.apply(SHAPE)
        applied = shaper.current()
        assert applied is not None
        assert applied.get_attr("TCA_OPTIONS").get_attr("TCA_NETEM_RATE")["rate"] == 1_250_000
        shaper.change(LinkShape(0.05))
        changed = shaper.current().get_attr("TCA_OPTIONS")
        assert changed["delay"] > applied.get_attr("TCA_OPTIONS")["delay"]
        assert changed.get_attr("TCA_NETEM_RATE")["rate"] == 0
        assert shaper.clear() is True
        assert shaper.current() is None
        assert shaper.clear() is False

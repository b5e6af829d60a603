"""LinkShape: what it accepts, and errors that name the field and the value."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emu.links.spec import LinkShape


def test_defaults_are_an_unshaped_link_apart_from_latency() -> None:
    shape = LinkShape(0.02)
    assert (shape.jitter_s, shape.bandwidth_bps, shape.loss) == (0, None, 0)


@given(
    latency=st.floats(0, 10),
    jitter=st.floats(0, 1),
    bandwidth=st.none() | st.floats(1, 1e11),
    loss=st.floats(0, 1),
)
def test_accepts_every_finite_shape_in_range(
    latency: float, jitter: float, bandwidth: float | None, loss: float
) -> None:
    LinkShape(latency, jitter, bandwidth, loss)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("latency_s", -0.001),
        ("latency_s", math.nan),
        ("latency_s", "20ms"),
        ("jitter_s", -1),
        ("jitter_s", math.inf),
        ("bandwidth_bps", 0),
        ("bandwidth_bps", True),
        ("loss", 1.5),
        ("loss", -0.1),
    ],
)
def test_rejects_a_bad_field_naming_it_and_its_value(field: str, value: object) -> None:
    fields = {"latency_s": 0.02, field: value}
    with pytest.raises(ValueError, match=rf"LinkShape\.{field} .*got {value!r}"):
        LinkShape(**fields)

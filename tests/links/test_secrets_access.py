"""An agent's secrets travel in a file, not in its environment (emu.agent.config): the host
blanks them in FOGLAB_AGENT and writes them root's 0400 (emu.engines.docker.engine._archive); the
agent fills them back in; a bad file is named with its field, never echoed."""

from __future__ import annotations

import io
import tarfile

import pytest

from emu.agent.config import (
    CONFIG_VARIABLE,
    SECRETS_VARIABLE,
    AgentConfig,
    load_config,
    secrets_text,
    with_secrets,
    without_secrets,
)
from emu.engines.docker.engine import _archive

CLOSED = AgentConfig(node="gw-1", mqtt="10.0.0.1:1883", mqtt_user="gw-1",
                     mqtt_password="pw-of-gw-1", zookeeper_auth="foglab:zk-secret")


def test_the_environment_carries_no_secret_and_the_file_gives_them_back(tmp_path) -> None:
    public, found = without_secrets(CLOSED)
    variable = public.to_json()
    assert "pw-of-gw-1" not in variable and "zk-secret" not in variable
    assert found == {"mqtt_password": "pw-of-gw-1", "zookeeper_auth": "foglab:zk-secret"}
    path = tmp_path / "secrets.json"
    path.write_text(secrets_text(CLOSED) or "")
    loaded = load_config({CONFIG_VARIABLE: variable, SECRETS_VARIABLE: str(path)})
    assert loaded == CLOSED
    # An open cluster's config has none: no file, and none needed.
    assert secrets_text(AgentConfig(node="gw-1", mqtt="x:1")) is None
    assert with_secrets(public, str(tmp_path / "absent")) == public


@pytest.mark.parametrize(("text", "named"), [
    ("the-password-itself", "is not JSON"),
    ('["the-password-itself"]', "is not a JSON object"),
    ('{"mqtt_password": "x", "node": "evil"}', "field 'node'"),
    ('{"mqtt_password": 7}', "field 'mqtt_password'"),
])
def test_a_bad_secrets_file_is_named_never_echoed(tmp_path, text, named) -> None:
    path = tmp_path / "secrets.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=named) as refused:
        with_secrets(CLOSED, str(path))
    assert str(path) in str(refused.value) and "the-password-itself" not in str(refused.value)


def test_the_secrets_file_is_put_roots_and_0400_in_a_0700_folder() -> None:
    data = _archive((("/etc/x.conf", "x"),), (("/run/foglab/secrets.json", "{}"),))
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        modes = {m.name: (m.mode, m.uid, m.isdir()) for m in archive.getmembers()}
    assert modes == {"etc/x.conf": (0o644, 0, False), "run/foglab": (0o700, 0, True),
                     "run/foglab/secrets.json": (0o400, 0, False)}

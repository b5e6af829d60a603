"""Whether the kernel can encrypt a swarm's overlay network, asked of the kernel itself.

Docker's encrypted overlay (`--opt encrypted`, `run.swarm_encrypted`) programs IPsec states
between the nodes: ESP in transport mode with AES-GCM (`rfc4106(gcm(aes))`, a 64-bit ICV). A
kernel without ESP or GCM takes the network's creation and then drops the traffic between
nodes (its states fail in the engines' logs): nothing says so to the run. So before an
encrypted overlay is made, the same kind of state is added in a network namespace of its own
(`unshare --net ip xfrm state add ...`, nothing of the host's touched, gone with the
namespace), and a refusal names what the kernel answered.

The probe speaks for this host's kernel: for a one-node swarm (this host's engine) and for
Docker-in-Docker nodes (emu.engines.swarm.nodes), which share it. Nodes on other hosts (a target
whose engines report another kernel) are not probed: their kernels are their owners'.
"""

from __future__ import annotations

import platform
import secrets
import shutil
import subprocess
from collections.abc import Iterable

AEAD = "rfc4106(gcm(aes))"  # what Docker's overlay driver programs
ICV_BITS = "64"
PROBE_S = 10


def probe_command() -> list[str]:
    """`ip xfrm state add` of an ESP state like Docker's, in a fresh network namespace."""
    key = "0x" + secrets.token_hex(20)  # a 128-bit AES key and a 32-bit salt
    return ["unshare", "--net", "ip", "xfrm", "state", "add", "src", "192.0.2.1", "dst",
            "192.0.2.2", "proto", "esp", "spi", "0x100", "reqid", "1", "mode", "transport",
            "aead", AEAD, key, ICV_BITS]


def kernel_refusal() -> str | None:
    """None when this host's kernel takes an ESP state with AES-GCM; else why not (what the
    kernel, or the probe, answered)."""
    missing = [tool for tool in ("unshare", "ip") if shutil.which(tool) is None]
    if missing:
        return f"cannot probe the kernel: no {' nor '.join(missing)} on this host"
    try:
        done = subprocess.run(probe_command(), capture_output=True, text=True,
                              timeout=PROBE_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cannot probe the kernel: {error}"
    if done.returncode == 0:
        return None
    answer = (done.stderr or done.stdout).strip().splitlines()
    return (f"the kernel refused an IPsec ESP state with AES-GCM ({AEAD}), which Docker's "
            f"encrypted overlay needs: `ip xfrm state add` answered "
            f"{answer[-1] if answer else f'status {done.returncode}'!r}")


def on_this_kernel(kernels: Iterable[str]) -> bool:
    """Whether every node's engine reports this host's kernel release: then the probe here
    speaks for them."""
    release = platform.release()
    return all(kernel == release for kernel in kernels)

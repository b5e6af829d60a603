"""The agent's TLS, on a cluster that has it (`run.tls`, emu.cluster.tls): its clients trust
only the run's authority and take only a server whose certificate names the role they expect.

Only imported then: without TLS the agent keeps OpenSSL out of its process
(emu.agent.__main__.without_openssl). Nothing here imports ssl before `use_tls`: an agent
forked from the zygote (emu.agent.zygote) inherits the zygote's stand-in for it.
"""

from __future__ import annotations

import sys
from typing import Any

# The names emu.cluster.tls.ROLE_NAMES gives each role's certificates.
BROKER_NAME = "broker.foglab"
ZOOKEEPER_NAME = "zookeeper.foglab"
_ca = ""
_named: Any = None  # the context class, made once the real ssl is in


def use_tls(ca: str) -> None:
    """Connect every client of this process with TLS, trusting the authority `ca` (PEM)."""
    global _ca, _named
    _ca = ca
    ssl = _real_ssl()

    class Named(ssl.SSLContext):
        """A client context that checks the server's certificate against one name, whatever
        address the client connects to: agents reach the servers through the links' relays,
        whose addresses no certificate names."""

        server_name = ""

        def wrap_socket(self, sock, *args, server_hostname=None, **kwargs):
            return super().wrap_socket(sock, *args, server_hostname=self.server_name,
                                       **kwargs)

    _named = Named


def _real_ssl() -> Any:
    """The real ssl module. The zygote's stand-in (which paho bound when the zygote imported
    it) is replaced: the real module is imported and every module holding the stand-in gets
    it instead; hashlib keeps its built-in algorithms."""
    stand_in = sys.modules.get("ssl")
    if stand_in is not None and "SSLContext" not in vars(stand_in):
        del sys.modules["ssl"]
        if "_hashlib" in sys.modules and sys.modules["_hashlib"] is None:
            del sys.modules["_hashlib"]
    import ssl

    if stand_in is not None and stand_in is not ssl:
        for module in list(sys.modules.values()):
            if getattr(module, "__dict__", {}).get("ssl") is stand_in:
                module.ssl = ssl
    return ssl


def enabled() -> bool:
    return bool(_ca)


def context(server_name: str) -> Any:
    """A client context trusting the run's authority and taking only `server_name`
    (PROTOCOL_TLS_CLIENT: the certificate required, its name checked)."""
    import ssl

    made = _named(ssl.PROTOCOL_TLS_CLIENT)
    made.server_name = server_name
    made.minimum_version = ssl.TLSVersion.TLSv1_2
    made.load_verify_locations(cadata=_ca)
    return made

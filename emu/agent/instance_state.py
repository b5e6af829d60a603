"""An operator instance's state as it moves (emu.agent.migration) or is checkpointed
(emu.agent.checkpoint): the keys of the last messages its input session saw, and the
operator's snapshot, packed in one piece of bytes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emu.agent.operators import Operator

PACK_MAGIC = b"foglab-migration 1\n"


def pack(seen: list, snapshot: bytes) -> bytes:
    """What moves: a header line (the last keys seen) and the operator's snapshot."""
    header = json.dumps({"seen": seen, "snapshot": len(snapshot)}, separators=(",", ":"))
    return PACK_MAGIC + header.encode() + b"\n" + snapshot


def unpack(data: bytes) -> tuple[list, bytes]:
    if not data.startswith(PACK_MAGIC):
        raise ValueError(f"not a migration state (it starts {bytes(data[:20])!r})")
    end = data.index(b"\n", len(PACK_MAGIC))
    header = json.loads(data[len(PACK_MAGIC):end])
    snapshot = data[end + 1:]
    if len(snapshot) != header["snapshot"]:
        raise ValueError(f"the migration state is cut: {len(snapshot)} bytes of snapshot, its "
                         f"header says {header['snapshot']}")
    return header["seen"], snapshot


def restore(operator: Operator, state: bytes) -> list:
    """Restore the operator from a moved or checkpointed state; the keys it had seen."""
    seen, snapshot = unpack(state)
    operator.restore(snapshot)
    return seen

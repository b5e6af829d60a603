"""The agents' records, read back as the result tables the simulator writes (same schema).

A node's records directory holds `sent.csv` (every message its drivers emitted, with `dropped`
set when the emulated device link lost it) and `received.csv` (every message a sink operator of
the node got). The `messages` table has a row per received message and a lost row per dropped
one, as the simulator's has a row per delivered or lost message. A message that was sent, not
dropped and never received was either filtered by an operator or lost past the device link;
the records cannot tell which, so it has no row and is counted as `unaccounted` in the facts.
Times are seconds since the run's epoch, on the host clock that every container shares.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

SENT_COLUMNS = {"id": "int64", "stream": "string", "source": "string", "t_sent": "float64",
                "dropped": "int64"}
RECEIVED_COLUMNS = {"id": "int64", "stream": "string", "source": "string", "sink": "string",
                    "t_sent": "float64", "t_received": "float64", "hops": "int64"}


def _read(directories: list[Path], name: str, columns: dict[str, str]) -> pd.DataFrame:
    frames = [pd.read_csv(path, dtype=columns, keep_default_na=False)
              for directory in directories
              if (path := directory / name).exists() and path.stat().st_size > 0]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})
    return pd.concat(frames, ignore_index=True)


def read_records(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every node's sent and received rows under `root` (one folder per node)."""
    directories = sorted(p for p in Path(root).iterdir() if p.is_dir())
    if not directories:
        raise FileNotFoundError(f"no node records under {root}")
    return (_read(directories, "sent.csv", SENT_COLUMNS),
            _read(directories, "received.csv", RECEIVED_COLUMNS))


def messages_table(sent: pd.DataFrame, received: pd.DataFrame, epoch: float,
                   duration: float) -> tuple[dict, dict]:
    """The `messages` columns, and facts: sent, received, dropped, duplicated, unaccounted.

    Only messages sent within the run's duration count, as in the simulator; a message
    received twice (QoS 1 is at least once) keeps its first arrival and counts as duplicated.
    """
    sent = sent[(sent["t_sent"] - epoch) < duration]
    received = received[received["id"].isin(sent["id"])]
    received = received.sort_values("t_received", kind="stable")
    first = received.drop_duplicates(subset=["id", "sink"])
    dropped = sent[sent["dropped"] != 0]
    nan = [math.nan] * len(dropped)
    columns = {
        "id": [*first["id"], *dropped["id"]],
        "stream": [*first["stream"], *dropped["stream"]],
        "source": [*first["source"], *dropped["source"]],
        "sink": [*first["sink"], *[""] * len(dropped)],
        "t_sent": [*(first["t_sent"] - epoch), *(dropped["t_sent"] - epoch)],
        "t_received": [*(first["t_received"] - epoch), *nan],
        "latency": [*(first["t_received"] - first["t_sent"]), *nan],
        "hops": [*first["hops"], *[0] * len(dropped)],
        "lost": [False] * len(first) + [True] * len(dropped),
    }
    delivered = first["id"].nunique()
    facts = {"sent": len(sent), "received": delivered, "dropped": len(dropped),
             "duplicated": len(received) - len(first),
             "unaccounted": len(sent) - len(dropped) - delivered}
    return columns, facts

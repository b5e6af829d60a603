"""The error that stops an emulated run."""

from __future__ import annotations


class EmuError(RuntimeError):
    """The emulated run could not go on; says which step and node."""

"""A user's policy module that fails when imported (the loader must say so)."""

raise RuntimeError("this module is broken on purpose")

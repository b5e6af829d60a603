"""Tests of emu.links: link shapes, the relay, the netem probe and shaper."""

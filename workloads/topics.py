"""MQTT topic filters: wildcards (`+`, `#`) and shared subscriptions (`$share/group/...`).

Pure Python with no imports: the gateway image carries this file, and its agent matches
topics by these same rules (emu.agent.protocol)."""

from __future__ import annotations


def matches(topic_filter: str, topic: str) -> bool:
    """True when an MQTT topic filter (shared or not) matches a topic name (MQTT 3.1.1,
    section 4.7; a shared subscription matches what its filter matches)."""
    filter_levels = shared(topic_filter)[1].split("/")
    topic_levels = topic.split("/")
    if topic.startswith("$") and filter_levels[0] in ("+", "#"):
        return False  # wildcards never match $SYS-style topics at the first level
    for i, level in enumerate(filter_levels):
        if level == "#":
            return True
        if i >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[i]:
            return False
    return len(filter_levels) == len(topic_levels)


def shared(topic_filter: str) -> tuple[str | None, str]:
    """`$share/g/city/#` -> ('g', 'city/#'); a plain filter -> (None, filter)."""
    parts = topic_filter.split("/", 2)
    if parts[0] == "$share" and len(parts) == 3 and parts[1] and parts[2]:
        return parts[1], parts[2]
    return None, topic_filter


def valid_filter(topic_filter: str) -> bool:
    group, plain = shared(topic_filter)
    if group is None and topic_filter.startswith("$share/"):
        return False  # a $share prefix without a group or a filter
    levels = plain.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            return False
        if "+" in level and level != "+":
            return False
    return bool(topic_filter)

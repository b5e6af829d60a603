"""The agent's parts talk to it through emu.agent.parts.AgentSurface: the Agent has every
member the surface names, and no part imports emu.agent.agent or reads a private member of
its agent (no broker: the agent is built, not started)."""

from __future__ import annotations

import ast
from pathlib import Path

from emu.agent.agent import Agent
from emu.agent.config import AgentConfig, DriverConfig, OperatorConfig
from emu.agent.parts import AgentSurface

AGENT = Path(__file__).resolve().parents[2] / "emu" / "agent"
# What runs an Agent, rather than being a part of one.
RUNS_AN_AGENT = {"agent.py", "__main__.py", "measure.py", "zygote.py"}


def surface_members() -> tuple[set[str], set[str]]:
    """(the surface's attributes, its methods and properties)."""
    attributes = set(AgentSurface.__annotations__)
    methods = {name for name, value in vars(AgentSurface).items()
               if not name.startswith("_") and (callable(value) or isinstance(value, property))}
    return attributes, methods


def test_the_agent_has_every_member_of_its_surface(tmp_path: Path) -> None:
    agent = Agent(AgentConfig(node="n", mqtt="127.0.0.1:1", records=str(tmp_path),
                              drivers=[DriverConfig("city", ["d"], 1.0)],
                              operators=[OperatorConfig("p", reads=["city/#"]),
                                         OperatorConfig("q", reads=["city/+"], session="s")]))
    attributes, methods = surface_members()
    assert {"node", "config", "scheduler", "operators", "sessions"} <= attributes
    assert {"take", "install", "keepalive", "session_ready"} <= methods
    assert [name for name in sorted(attributes) if name not in vars(agent)] == []
    # The Agent's own, not the surface's empty bodies.
    assert [name for name in sorted(methods)
            if vars(AgentSurface)[name] is getattr(Agent, name)] == []
    agent.records.close()


def test_no_part_imports_the_agent_or_reads_its_private_members() -> None:
    imports, private = [], []
    for path in sorted(AGENT.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if path.name not in RUNS_AN_AGENT and (
                    isinstance(node, ast.ImportFrom) and (
                        node.module == "emu.agent.agent"
                        or node.module == "emu.agent" and any(a.name == "agent"
                                                              for a in node.names))
                    or isinstance(node, ast.Import)
                    and any(a.name == "emu.agent.agent" for a in node.names)):
                imports.append(f"{path.name}:{node.lineno}")
            if path.name != "agent.py" and isinstance(node, ast.Attribute) \
                    and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name == "agent":
                    private.append(f"{path.name}:{node.lineno} agent.{node.attr}")
    assert imports == []
    assert private == []

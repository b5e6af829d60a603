"""Commands of the `foglab` group imported when first used, not when the command line starts:
`emu`, `calibrate`, `compare` and `apply` import the loader, pandas, Docker's SDK and the
emulation (seconds), and shell completion runs the whole program on every TAB.

A lazy command is listed by its name and a one-line summary; TAB completion offers it from
those alone. Running it, asking its --help, or completing its own options imports its module
and builds it as typer would have (tests/api/test_cli_streams.py checks the summaries against
the commands' own help)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Lazy:
    """A command (a function) or a group (a typer.Typer) at `module:attribute`."""

    where: str
    summary: str

    def build(self, name: str):
        """The click command, as typer builds one registered with the group."""
        module, _, attribute = self.where.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        if not isinstance(found, typer.Typer):
            single = typer.Typer(add_completion=False)
            single.command(name)(found)
            found = single
        command = typer.main.get_command(found)
        command.name = name
        return command


# name -> where its command is; the summaries are the commands' first sentences.
LAZY = {
    "calibrate": Lazy("emu.cli.calibrate_command:calibrate",
                      "Measure on this host's emulation what the model takes as inputs."),
    "compare": Lazy("experiments.compare_cli:compare",
                    "Compare two runs figure by figure: delivered, lost, throughput, latency "
                    "percentiles, CPU per node, downtime."),
    "apply": Lazy("experiments.apply_cli:apply",
                  "Plan the change from a running version of an experiment's jobs to this "
                  "one: a row per job to deploy, modify (in-place, replace or move) or "
                  "delete, with the model's apply time; exit 0 when nothing changes, 4 when "
                  "something would, 3 on a bad input."),
    "emu": Lazy("experiments.emu_commands:app",
                "Prepare the host and images; run topologies as containers."),
}


class QuickGroup(TyperGroup):
    """typer's group, that completes a word without importing pydantic: typer coerces an
    option's value through it (a tenth of a second to import), and its --help,
    --install-completion and --show-completion default to None, which is coerced; while
    completing, False is what they mean and needs no coercion."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if ctx.resilient_parsing:  # completing
            for param in self.get_params(ctx):
                if param.default is None and getattr(
                        getattr(param, "type_descriptor", None), "annotation", None) is bool:
                    param.default = False
        return super().parse_args(ctx, args)


class LazyGroup(QuickGroup):
    """The `foglab` group: the LAZY commands after its own, imported by `get_command`; while
    completing a word at this level each is a stand-in with its summary."""

    completing = False

    def list_commands(self, ctx) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in LAZY if n not in self.commands)]

    def get_command(self, ctx, cmd_name: str):
        if cmd_name in self.commands or cmd_name not in LAZY:
            return super().get_command(ctx, cmd_name)
        if self.completing:
            return TyperCommand(name=cmd_name, short_help=LAZY[cmd_name].summary)
        self.commands[cmd_name] = LAZY[cmd_name].build(cmd_name)
        return self.commands[cmd_name]

    def shell_complete(self, ctx, incomplete: str):
        self.completing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self.completing = False


__all__ = ["LAZY", "Lazy", "LazyGroup", "QuickGroup"]

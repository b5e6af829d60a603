"""What a user reads cites papers by their titles: "seed 002" means nothing outside the team."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SEED = re.compile(r"\bseeds? ?0\d\d\b", re.IGNORECASE)
# The files whose text users read: the README and docs/, notebooks, shipped descriptions and
# the CLIs' help (code comments and internal docstrings may keep the team's shorthand).
USER_FACING = ["README.md", "docs/**/*.md", "notebooks/*.ipynb", "experiments/*.yaml",
               "workloads/*.yaml", "topologies/*.yaml", "experiments/cli.py", "emu/cli/main.py"]


@pytest.mark.parametrize("path", sorted({p.relative_to(ROOT) for pattern in USER_FACING
                                          for p in ROOT.glob(pattern)}), ids=str)
def test_no_user_facing_text_cites_a_seed_number(path: Path) -> None:
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    cited = [f"{path}:{n}: {line.strip()}" for n, line in enumerate(lines, 1) if SEED.search(line)]
    assert not cited, "cite the paper by its title:\n" + "\n".join(cited)

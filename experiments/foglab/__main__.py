"""`python -m foglab`: the command line (experiments.entry), as the `foglab` command is."""

from experiments.entry import main

main()

"""experiments: experiment files, their runs and their results.

RESULTS_VARIABLE is here, where the command line's options (experiments.cli_options, which
must not load pandas: a TAB runs it) and the results store (experiments.results) both read
it: the environment variable naming the results folder where none is given (foglab run
--out, results --root, compare --out, import foglab); else `results`."""

RESULTS_VARIABLE = "FOGLAB_RESULTS"

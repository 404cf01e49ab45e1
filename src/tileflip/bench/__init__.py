"""Benchmarks on the GPU: tileflip against a same-run device copy and its peers, written as results files.

Modules: ``records`` (run metadata, timed medians, results files), ``cases`` (the suites' cases),
``peers`` (the callables timed), ``suites`` (the 2-D and permute suites), ``wide`` (the permute-wide
cases' generator), ``stability``, ``host``, ``cast``, ``tune``,
``device`` (the analyzer's device constants), ``distributed``, ``plots``, ``timing``, and the child
processes ``xla_child`` and ``measure``. ``tileflip bench`` (``tileflip.cli.bench``) runs them.
"""

"""The ``slca`` command line: its subcommands, what it prints, what it records.

- :mod:`.commands`: the ``slca`` console script and ``main(args)`` / ``sft(args)`` for
  in-process use (tests, notebooks);
- :mod:`.app`: :class:`~slca_lightning.cli.app.SLCACLI`, the LightningCLI behind ``fit``
  and ``sft`` (config checks, thread choice, quiet console, provenance);
- :mod:`.evaluate` (``slca eval``), :mod:`.export` (``slca export``),
  :mod:`.warm_start` (``slca warm-start``);
- :mod:`.console` (progress bar, quiet Lightning), :mod:`.provenance`
  (``provenance.json``), :mod:`.threads` (torch threads for the load), :mod:`.errors`
  (one-line errors), :mod:`.help_cache` (``--help`` served from the cache).
"""

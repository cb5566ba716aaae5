"""Console entry points: ``kforge-synthesize``, ``kforge-reproduce`` and ``kforge-tables``.

The scripts in the repository's ``pipelines/`` call the same functions, so a checkout and an
installed wheel run the same code with the same configs (``conf/``, found through `kforge.DATA_DIR`).
"""

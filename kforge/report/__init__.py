"""The paper's tables and figures, read from MLflow runs (``make reproduce``, ``kforge-tables``).

`tables` reads runs into data frames and computes each table; `render` writes them as CSV, Markdown
and LaTeX with their plots; `plots` draws the figures (also a beam search's tree, which the tracker
logs, so it imports nothing of kforge). Nothing is imported here, so `plots` stays light to import.
"""

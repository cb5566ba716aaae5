"""The ablation tables from MLflow under results/: the checkout's form of ``kforge-tables``.

    python pipelines/tables.py                                # every ablation, from ./mlflow.db
    python pipelines/tables.py tracking_uri=http://host:5000 baseline=compile
    python pipelines/tables.py resamples=10000 confidence=0.99   # the bootstrap intervals

kforge/apps/tables.py holds the code.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's kforge, installed or not

from kforge.apps.tables import main  # noqa: E402

if __name__ == "__main__":
    main()

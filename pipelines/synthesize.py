"""Synthesis sweeps into MLflow, through Hydra: the checkout's form of ``kforge-synthesize``.

    python pipelines/synthesize.py model=oracle backend=cpu problems=builtin_l1
    python pipelines/synthesize.py -m loop=single_shot,iterative model=gpt-5,claude-opus
    python pipelines/synthesize.py --help        # every config group and its choices

kforge/apps/synthesize.py holds the code.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's kforge, installed or not

from kforge.apps.synthesize import main  # noqa: E402

if __name__ == "__main__":
    main()

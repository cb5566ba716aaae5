"""`make reproduce`: the paper's three ablation sweeps, beam search's, the training step's and the precision's, then
the tables; the checkout's form of
``kforge-reproduce``.

    python pipelines/reproduce.py --models gpt-5,claude-opus --backends cuda --levels 1,2,3
    python pipelines/reproduce.py --models oracle --backends cpu            # offline dry run

kforge/apps/reproduce.py holds the code.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's kforge, installed or not

from kforge.apps.reproduce import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

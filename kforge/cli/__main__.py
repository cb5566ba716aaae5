"""``python -m kforge.cli``: the ``kforge`` command."""

import sys

from . import main

sys.exit(main())

"""``python -m tileflip.cli``: the ``tileflip`` command."""

import sys

from tileflip.cli import main

sys.exit(main())

"""``python -m flower.cli``: the same as the ``flower`` script."""

import sys

from . import main

sys.exit(main())

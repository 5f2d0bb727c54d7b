"""``python -m proxy.cli``: the ``dpgate`` command line."""

import sys

from .main import main

sys.exit(main())

"""``python -m hanet``: the ``hanet`` command line."""

import sys

from hanet.cli import main

sys.exit(main())

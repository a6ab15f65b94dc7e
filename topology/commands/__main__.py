"""``python -m topology.commands``: the `worx` command line (what the supervisor starts)."""

import sys

from topology.commands import main

sys.exit(main())

"""``python -m ragaudit.cli``: the ``ragaudit`` command."""

import sys

from . import main

sys.exit(main())

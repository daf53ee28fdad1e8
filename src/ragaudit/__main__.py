"""``python -m ragaudit``: the ``ragaudit`` command, exactly as ``python -m ragaudit.cli`` runs it.

runpy runs the command line's own ``__main__`` (which calls ``ragaudit.cli.main``): the package root
stays below the command line (tests/test_layering.py), and there is one entry module, not two.
"""

import runpy

runpy.run_module("ragaudit.cli", run_name="__main__", alter_sys=True)

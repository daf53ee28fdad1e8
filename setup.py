"""The one thing pyproject.toml cannot declare: the optional C extension ``ragaudit.metrics._speedups``.

It only speeds up reading runs given as Python objects (see its source); every path it takes has a
pure-Python twin giving the same numbers. ``optional=True``: where no C compiler or Python headers
are found, the build warns and the package installs pure (as markupsafe's speedups do).
``RAGAUDIT_PURE=1`` at build time skips it on purpose.
"""

import os

from setuptools import Extension, setup

ext_modules = []
if os.environ.get("RAGAUDIT_PURE", "") != "1":
    ext_modules.append(
        Extension(
            "ragaudit.metrics._speedups",
            ["src/ragaudit/metrics/_speedups.c", "src/ragaudit/metrics/_runfile.c", "src/ragaudit/metrics/_kernel.c"],
            depends=["src/ragaudit/metrics/_speedups.h"],
            optional=True,
        )
    )

setup(ext_modules=ext_modules)

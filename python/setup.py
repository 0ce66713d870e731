"""setuptools hook of python/pyproject.toml: record where libkvpool.so.0 is.

When setuptools builds the package, kvpool/_build_config.py is written into
the build (never the source tree) with the library directory of an
installed kvpool (_kvpool_build.installed_libdir: $KVPOOL_PREFIX/lib, else
pkg-config's libdir), so that the installed package loads that library with
no environment variable.  python/README.md has the loader's whole rule.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _kvpool_build  # noqa: E402


class BuildPy(build_py):
    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "kvpool", "_build_config.py")
        with open(target, "w", encoding="utf-8") as f:
            f.write(_kvpool_build.build_config_text())


setup(cmdclass={"build_py": BuildPy})

"""The PEP 517 build backend of python/pyproject.toml.

setuptools (Debian's python3-setuptools) builds the package.  setuptools
before 70.1 needs the separate ``wheel`` package to make a wheel; a virtual
environment made without --system-site-packages has setuptools but not
``wheel``, and offline it cannot fetch it.  There, and only there, this
backend writes the wheel itself: the package is pure Python (the C library
is installed by tools/install.sh), so a wheel is a zip of kvpool/*.py plus
the metadata of pyproject.toml.

Either way the build records where the installed libkvpool.so.0 is
(kvpool/_build_config.py, see installed_libdir), so that the installed
package loads it with no environment variable.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile

from setuptools import build_meta as _setuptools

HERE = os.path.dirname(os.path.abspath(__file__))


def installed_libdir() -> str | None:
    """The lib directory of an installed kvpool, first found of:

    1. $KVPOOL_PREFIX/lib (the --prefix given to tools/install.sh or cmake --install);
    2. `pkg-config --variable=libdir kvpool` (PKG_CONFIG_PATH=DIR/lib/pkgconfig;
       /usr/local/lib/pkgconfig needs nothing set);
    3. the building interpreter's prefix, sys.prefix/lib (a virtual environment
       used as the install prefix), then /usr/local/lib and /usr/lib;

    only if it holds libkvpool.so.0; else None (the loader then searches at
    import time, python/README.md).
    """
    prefix = os.environ.get("KVPOOL_PREFIX")
    dirs = [os.path.join(prefix, "lib")] if prefix else []
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "kvpool"],
                             capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            dirs.append(out.stdout.strip())
    except OSError:
        pass
    dirs += [os.path.join(sys.prefix, "lib"), "/usr/local/lib", "/usr/lib"]
    for d in dirs:
        if os.path.exists(os.path.join(d, "libkvpool.so.0")):
            return os.path.abspath(d)
    return None


def build_config_text() -> str:
    libdir = installed_libdir()
    return ('"""Recorded when the package was built (python/_kvpool_build.py)."""\n\n'
            f"LIBDIR = {libdir!r}\n")


def _have_wheel() -> bool:
    try:
        import wheel  # noqa: F401
    except ImportError:
        return False
    return True


# --- the PEP 517 hooks: setuptools when it can make wheels --------------------

get_requires_for_build_sdist = _setuptools.get_requires_for_build_sdist
build_sdist = _setuptools.build_sdist


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) if _have_wheel() else []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    if _have_wheel():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)
    name = _dist_info_name()
    d = os.path.join(metadata_directory, name)
    os.makedirs(d, exist_ok=True)
    for fname, data in _dist_info_files():
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if _have_wheel():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    return _build_pure_wheel(wheel_directory)


# --- the fallback: a pure-Python wheel with the standard library --------------


def _project() -> dict:
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - older Pythons: setuptools' vendored reader
        from setuptools.extern import tomli as tomllib
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _dist_info_name() -> str:
    p = _project()
    return f"{p['name']}-{p['version']}.dist-info"


def _metadata() -> bytes:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p['description']}", f"License: {p['license']['text']}",
             f"Requires-Python: {p['requires-python']}"]
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    for extra, reqs in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(HERE, p["readme"]), encoding="utf-8") as f:
        body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode()


def _dist_info_files() -> list[tuple[str, bytes]]:
    wheel = ("Wheel-Version: 1.0\nGenerator: kvpool _kvpool_build\nRoot-Is-Purelib: true\n"
             "Tag: py3-none-any\n").encode()
    return [("METADATA", _metadata()), ("WHEEL", wheel), ("top_level.txt", b"kvpool\n")]


def _build_pure_wheel(wheel_directory: str) -> str:
    p = _project()
    name = f"{p['name']}-{p['version']}-py3-none-any.whl"
    dist_info = _dist_info_name()
    files = []
    pkg = os.path.join(HERE, "kvpool")
    for fname in sorted(os.listdir(pkg)):
        # A packager bundling the library copies libkvpool.so.0 into kvpool/ first.
        if (fname.endswith(".py") and fname != "_build_config.py") or fname == "libkvpool.so.0":
            with open(os.path.join(pkg, fname), "rb") as f:
                files.append((f"kvpool/{fname}", f.read()))
    files.append(("kvpool/_build_config.py", build_config_text().encode()))
    files += [(f"{dist_info}/{n}", d) for n, d in _dist_info_files()]
    record = []
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arc},sha256={digest.decode()},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        z.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return name

"""How `import kvpool` finds libkvpool.so (kvpool/_lib.py), each case in a fresh interpreter."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import kvpool

PKG_DIR = os.path.dirname(kvpool.__file__)


def run_import(env_update, pythonpath, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("KVPOOL_LIB", "PYTHONPATH")}
    env.update(env_update)
    env["PYTHONPATH"] = pythonpath
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [sys.executable, "-c", "import kvpool; print(kvpool.library_path)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def test_a_wrong_kvpool_lib_is_an_import_error_naming_it(tmp_path):
    r = run_import({"KVPOOL_LIB": "/nonexistent/libkvpool.so"}, os.path.dirname(PKG_DIR), tmp_path)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "/nonexistent/libkvpool.so" in r.stderr
    assert "KVPOOL_LIB" in r.stderr


def test_kvpool_lib_may_name_the_directory(tmp_path):
    (tmp_path / "d").mkdir()
    shutil.copy(kvpool.library_path, tmp_path / "d" / "libkvpool.so")
    r = run_import({"KVPOOL_LIB": str(tmp_path / "d")}, os.path.dirname(PKG_DIR), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "d" / "libkvpool.so")


@pytest.mark.parametrize("site", ["dist-packages", "site-packages"])
def test_an_installed_package_loads_the_library_of_its_prefix(tmp_path, site):
    # tools/install.sh --prefix DIR puts the library in DIR/lib; the package
    # copied to DIR/lib/python3/<site>/kvpool finds it with no KVPOOL_LIB.
    prefix = tmp_path / "prefix"
    pkgs = prefix / "lib" / "python3" / site
    shutil.copytree(PKG_DIR, pkgs / "kvpool", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(kvpool.library_path, prefix / "lib" / "libkvpool.so")
    r = run_import({}, str(pkgs), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(prefix / "lib" / "libkvpool.so")


def test_a_library_next_to_the_package_comes_first(tmp_path):
    pkgs = tmp_path / "pkgs"
    shutil.copytree(PKG_DIR, pkgs / "kvpool", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(kvpool.library_path, pkgs / "kvpool" / "libkvpool.so")
    r = run_import({}, str(pkgs), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkgs / "kvpool" / "libkvpool.so")


def test_the_search_order():
    from kvpool import _lib

    env = os.environ.get("KVPOOL_LIB")
    c = _lib.candidates()
    if env:
        assert c[0] in (env, os.path.join(env, "libkvpool.so"))
        c = c[1:]
    here = os.path.abspath(PKG_DIR)
    # A bundled copy first (a wheel carries libkvpool.so.0), ...
    assert c[:2] == [os.path.join(here, "libkvpool.so.0"), os.path.join(here, "libkvpool.so")]
    # ... the interpreter's prefix and /usr/local/lib (cmake --install's default) before
    # the system's loader by name, last.
    assert c.index(os.path.join(sys.prefix, "lib", "libkvpool.so.0")) < c.index("libkvpool.so.0")
    assert "/usr/local/lib/libkvpool.so.0" in c


def test_a_wheel_bundling_libkvpool_so_0_loads_it(tmp_path):
    pkgs = tmp_path / "pkgs"
    shutil.copytree(PKG_DIR, pkgs / "kvpool", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(kvpool.library_path, pkgs / "kvpool" / "libkvpool.so.0")
    r = run_import({}, str(pkgs), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkgs / "kvpool" / "libkvpool.so.0")


def test_a_failed_lookup_says_where_it_looked_and_what_to_set(tmp_path):
    pkgs = tmp_path / "pkgs"
    shutil.copytree(PKG_DIR, pkgs / "kvpool", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"KVPOOL_LIBRARY": "", "RUNFILES_DIR": "", "TEST_SRCDIR": ""}
    r = run_import(env, str(pkgs), tmp_path)
    if r.returncode == 0:
        pytest.skip(f"this machine has an installed libkvpool: {r.stdout.strip()}")
    msg = r.stderr
    assert "ImportError: kvpool: cannot load libkvpool.so: not found." in msg
    assert "KVPOOL_LIBRARY" in msg and "cmake --install" in msg and "pip install ./python" in msg
    assert str(pkgs / "kvpool" / "libkvpool.so.0") + " (absent)" in msg
    assert "/usr/local/lib/libkvpool.so.0" in msg


def test_kvpool_library_is_read_before_kvpool_lib(tmp_path):
    (tmp_path / "d").mkdir()
    shutil.copy(kvpool.library_path, tmp_path / "d" / "libkvpool.so.0")
    r = run_import(
        {"KVPOOL_LIBRARY": str(tmp_path / "d"), "KVPOOL_LIB": "/nonexistent/libkvpool.so"},
        os.path.dirname(PKG_DIR),
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "d" / "libkvpool.so.0")


def test_a_sanitizer_build_is_named_with_the_command_for_a_plain_one():
    from kvpool import _lib

    err = "/x/libkvpool.so: undefined symbol: __tsan_func_entry"
    assert _lib.sanitizer_of(err).startswith("ThreadSanitizer")
    assert _lib.sanitizer_of("x: undefined symbol: __asan_report_load8").startswith("Address")
    assert _lib.sanitizer_of("x: cannot open shared object file") is None
    assert "bazel build //tools:libkvpool.so" in _lib.PLAIN_BUILD_HINT


def test_the_version_is_the_librarys_and_the_headers():
    root = os.path.dirname(os.path.dirname(PKG_DIR))
    with open(os.path.join(root, "include", "kvpool", "version.h"), encoding="utf-8") as f:
        header = re.search(r'#define KVP_VERSION\s+"([^"]+)"', f.read()).group(1)
    with open(os.path.join(os.path.dirname(PKG_DIR), "pyproject.toml"), encoding="utf-8") as f:
        project = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
    assert kvpool.__version__ == header == project


def test_import_kvpool_does_not_import_numpy(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.path.dirname(PKG_DIR)
    r = subprocess.run(
        [sys.executable, "-c", "import sys, kvpool; print('numpy' in sys.modules)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"

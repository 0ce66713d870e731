/*
 * python/tests/pyembed.c - Debian's Python 3 as a program built by Bazel.
 *
 * The Python tests load libkvpool.so into an interpreter.  In the plain
 * configuration that interpreter is /usr/bin/python3.  Under --config=asan
 * and --config=tsan the library is instrumented and needs the sanitizer
 * runtime in the process before it loads; clang links that runtime only
 * into executables, and preloading clang 14's shared TSan runtime into
 * /usr/bin/python3 crashes at startup (its __cxa_atexit interceptor runs
 * before the runtime is initialised).  So the sanitizer runs use this
 * program instead: the same libpython3.11, standard library and
 * dist-packages (numpy, pytest) as /usr/bin/python3, in an executable that
 * the configuration's -fsanitize flags link the runtime into.
 */
#include <python3.11/Python.h>

int main(int argc, char **argv)
{
	return Py_BytesMain(argc, argv);
}

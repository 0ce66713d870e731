/*
 * tests/remote_testutil.h - a real redis-server for the remote tier's tests.
 *
 * rt_server_start picks a free loopback port (bind to port 0, read it
 * back, close), starts `redis-server --port P --bind 127.0.0.1 --save ''
 * --appendonly no` as a child and waits until `redis-cli -p P PING`
 * answers.  rt_server_kill sends SIGKILL and reaps it; rt_server_restart
 * starts a new one on the same port.  rt_cli runs redis-cli with the
 * arguments given.  A test that exits kills its server (atexit).
 */
#ifndef KVPOOL_TESTS_REMOTE_TESTUTIL_H
#define KVPOOL_TESTS_REMOTE_TESTUTIL_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/testutil.h"

extern char **environ;

static pid_t rt_pid = -1;
static int rt_port;

static inline int rt_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
	socklen_t len = sizeof a;
	CHECK(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	close(fd);
	return ntohs(a.sin_port);
}

static inline void rt_sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Run redis-cli -p PORT ARGS... (NULL-terminated); returns its exit status. */
static inline int rt_cli(const char *arg, ...)
{
	const char *argv[32];
	char port[16];
	int n = 0;
	va_list ap;
	pid_t pid;
	int st;
	snprintf(port, sizeof port, "%d", rt_port);
	argv[n++] = "redis-cli";
	argv[n++] = "-p";
	argv[n++] = port;
	va_start(ap, arg);
	for (const char *a = arg; a != NULL && n < 31; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	CHECK(posix_spawnp(&pid, "redis-cli", &fa, NULL, (char *const *)argv, environ) == 0);
	posix_spawn_file_actions_destroy(&fa);
	CHECK(waitpid(pid, &st, 0) == pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline void rt_server_kill(void)
{
	if (rt_pid > 0) {
		kill(rt_pid, SIGCONT);
		kill(rt_pid, SIGKILL);
		waitpid(rt_pid, NULL, 0);
		rt_pid = -1;
	}
}

static inline void rt_server_spawn(void)
{
	char port[16];
	snprintf(port, sizeof port, "%d", rt_port);
	const char *argv[] = {"redis-server", "--port",     port,      "--bind",
	                      "127.0.0.1",    "--save",     "",        "--appendonly",
	                      "no",           "--loglevel", "warning", NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	CHECK(posix_spawnp(&rt_pid, "redis-server", &fa, NULL, (char *const *)argv, environ) == 0);
	posix_spawn_file_actions_destroy(&fa);
	for (int i = 0; i < 500; i++) {
		if (rt_cli("PING", NULL) == 0)
			return;
		rt_sleep_ms(10);
	}
	fprintf(stderr, "redis-server on port %d did not answer\n", rt_port);
	exit(1);
}

/* Start the server; returns its URL in @url. */
static inline void rt_server_start(char *url, size_t cap)
{
	rt_port = rt_free_port();
	rt_server_spawn();
	atexit(rt_server_kill);
	snprintf(url, cap, "redis://127.0.0.1:%d", rt_port);
}

static inline void rt_server_restart(void)
{
	rt_server_kill();
	rt_server_spawn();
}

static inline uint64_t rt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* KVPOOL_TESTS_REMOTE_TESTUTIL_H */

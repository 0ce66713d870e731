/*
 * tests/seccomp_testutil.h - deny membarrier to the whole process, for the
 * tests that check what the pool and the buffer cache do when it fails after
 * they were made.  The filter cannot be lifted: such a test is a program of
 * its own.  seccomp with PR_SET_NO_NEW_PRIVS needs no privilege.
 */
#ifndef KVPOOL_TESTS_SECCOMP_TESTUTIL_H
#define KVPOOL_TESTS_SECCOMP_TESTUTIL_H

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/testutil.h"

/* Make membarrier fail with EPERM in every thread of the process. */
static inline void tu_deny_membarrier(void)
{
	struct sock_filter f[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 0, 1),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof f / sizeof f[0], f};
	CHECK_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	CHECK_EQ(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog),
	         0);
	errno = 0;
	CHECK_EQ(syscall(SYS_membarrier, 0 /* MEMBARRIER_CMD_QUERY */, 0, 0), -1);
	CHECK_EQ(errno, EPERM);
}

#endif /* KVPOOL_TESTS_SECCOMP_TESTUTIL_H */

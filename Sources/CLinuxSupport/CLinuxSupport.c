#define _GNU_SOURCE
#include "CLinuxSupport.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

int tb_spawn_file_actions_addclosefrom(posix_spawn_file_actions_t *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
}

int tb_set_nondumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

int tb_syncfs(int fd) {
    return syncfs(fd);
}

/// struct sched_attr (uapi linux/sched/types.h), which glibc before 2.41 does not declare.
struct tb_sched_attr {
    unsigned int size;
    unsigned int sched_policy;
    unsigned long long sched_flags;
    int sched_nice;
    unsigned int sched_priority;
    unsigned long long sched_runtime;
    unsigned long long sched_deadline;
    unsigned long long sched_period;
    unsigned int sched_util_min;
    unsigned int sched_util_max;
};

/// Gives the calling thread (pid 0: Linux schedules threads) `policy` and `slice` (0: the default), its nice value
/// kept, reset on fork: the threads and processes it starts (libdispatch's workers, a browser) begin with the default
/// slice and a nice value of at least 0 (they keep a SCHED_BATCH policy: the kernel resets only the real-time ones).
/// With `only_from_other`, leaves a thread that is not SCHED_OTHER alone.
static int tb_set_own_scheduling(unsigned int policy, unsigned long long slice, int only_from_other) {
    struct tb_sched_attr attr = {0};
    if (syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0) != 0) return errno;
    if (only_from_other && attr.sched_policy != SCHED_OTHER) return 0;
    attr.size = sizeof attr;
    attr.sched_policy = policy;
    attr.sched_flags = 0x01;  // SCHED_FLAG_RESET_ON_FORK
    attr.sched_priority = 0;
    attr.sched_runtime = slice;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) return errno;
    return 0;
}

int tb_make_thread_batch(void) {
    static __thread int done;
    if (done) return 0;
    int error = tb_set_own_scheduling(SCHED_BATCH, 0, 0);
    if (error == 0) done = 1;
    return error;
}

int tb_thread_is_batch(void) {
    return (sched_getscheduler(0) & ~SCHED_RESET_ON_FORK) == SCHED_BATCH;
}

int tb_request_thread_slice(unsigned long long nanoseconds) {
    return tb_set_own_scheduling(SCHED_OTHER, nanoseconds, 1);
}

int tb_is_dumpable(void) {
    return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
}

int tb_exclude_from_core_dumps(void *address, size_t length) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return -1;
    unsigned long start = (unsigned long)address & ~((unsigned long)page - 1);
    unsigned long end = ((unsigned long)address + length + (unsigned long)page - 1) & ~((unsigned long)page - 1);
    return madvise((void *)start, end - start, MADV_DONTDUMP);
}

int tb_pidfd_is_alive(int pidfd) {
#ifdef SYS_pidfd_send_signal
    return syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0;
#else
    errno = ENOSYS;
    return 0;
#endif
}

unsigned long long tb_pidfd_process_id(int pidfd) {
    // Whether pidfds are on pidfs is the running kernel's property: asked of the first pidfd, not of each (one
    // system call less for every accepted connection). 0 not known yet, 1 on pidfs, -1 not.
    static int on_pidfs = 0;
    int known = __atomic_load_n(&on_pidfs, __ATOMIC_RELAXED);
    if (known == 0) {
        struct statfs file_system;
        if (fstatfs(pidfd, &file_system) != 0) return 0;
        known = file_system.f_type == 0x50494446 /* PID_FS_MAGIC */ ? 1 : -1;
        __atomic_store_n(&on_pidfs, known, __ATOMIC_RELAXED);
    }
    struct stat info;
    if (known < 0 || fstat(pidfd, &info) != 0) return 0;
    return (unsigned long long)info.st_ino;
}

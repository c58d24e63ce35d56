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

int tb_make_thread_batch(void) {
    static __thread int done;
    if (done) return 0;
    // pid 0 is the calling thread: Linux schedules threads, not processes.
    if (sched_setscheduler(0, SCHED_BATCH, &(struct sched_param){.sched_priority = 0}) != 0) return errno;
    done = 1;
    return 0;
}

int tb_thread_is_batch(void) {
    return sched_getscheduler(0) == SCHED_BATCH;
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

int tb_request_thread_slice(unsigned long long nanoseconds) {
    struct tb_sched_attr attr = {0};
    if (syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0) != 0) return errno;
    if (attr.sched_policy != SCHED_OTHER) return 0;
    attr.size = sizeof attr;
    // SCHED_FLAG_RESET_ON_FORK: the threads and processes it starts (libdispatch's workers, a browser) begin with
    // the default slice, not its own.
    attr.sched_flags = 0x01;
    attr.sched_runtime = nanoseconds;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0) return errno;
    return 0;
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
    struct statfs file_system;
    struct stat info;
    if (fstatfs(pidfd, &file_system) != 0 || file_system.f_type != 0x50494446 /* PID_FS_MAGIC */) return 0;
    if (fstat(pidfd, &info) != 0) return 0;
    return (unsigned long long)info.st_ino;
}

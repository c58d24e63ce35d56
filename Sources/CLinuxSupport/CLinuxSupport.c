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

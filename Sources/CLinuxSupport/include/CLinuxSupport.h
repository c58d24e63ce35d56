#pragma once
// Linux calls Swift's Glibc module does not offer: they are declared only under _GNU_SOURCE, or are variadic.
#include <malloc.h>
#include <spawn.h>
#include <stddef.h>
#include <sys/types.h>

/// Closes every descriptor from `from` up in the child of posix_spawn (glibc >= 2.34). Returns 0 or an errno.
int tb_spawn_file_actions_addclosefrom(posix_spawn_file_actions_t *actions, int from);

/// prctl(PR_SET_DUMPABLE, 0): no core dump, and no ptrace or /proc/<pid>/mem by other processes of the user.
int tb_set_nondumpable(void);

/// syncfs(2) (declared only under _GNU_SOURCE): writes out everything cached for the file system holding `fd`.
int tb_syncfs(int fd);

/// Makes the calling thread SCHED_BATCH, once per thread (sched_setattr, its nice value kept, reset on fork): a
/// thread the scheduler may no longer let preempt the running thread when it wakes, for background work that must not
/// delay the thread it shares a CPU with. Returns 0 or an errno.
int tb_make_thread_batch(void);

/// Whether the calling thread is SCHED_BATCH.
int tb_thread_is_batch(void);

/// Asks the scheduler for `nanoseconds` slices for the calling thread, when it is SCHED_OTHER (sched_setattr's
/// sched_runtime, its policy and nice value kept, reset on fork; 0 asks for the default): a shorter slice gives it an
/// earlier deadline under EEVDF (Linux >= 6.12, which takes 0.1 to 100 ms; earlier kernels ignore it), so it runs
/// sooner when it wakes, and is protected from preemption for a shorter time. Returns 0 or an errno.
int tb_request_thread_slice(unsigned long long nanoseconds);

/// prctl(PR_GET_DUMPABLE): 1 when the process may be dumped, 0 when not.
int tb_is_dumpable(void);

/// madvise(MADV_DONTDUMP) over the pages holding [address, address + length).
int tb_exclude_from_core_dumps(void *address, size_t length);

/// malloc_trim(0): gives every whole free page of the heap's arenas back to the system (malloc.h, which the Glibc
/// module does not include). Returns whether it released any.
static inline int tb_release_free_heap(void) {
    return malloc_trim(0);
}

/// Whether the process a pidfd refers to is still alive (pidfd_send_signal with signal 0).
int tb_pidfd_is_alive(int pidfd);

/// The inode of a pidfd on pidfs (Linux >= 6.9): an id of the process that is never reused while the system runs,
/// whatever its pid namespace; 0 where pidfds are not on pidfs.
unsigned long long tb_pidfd_process_id(int pidfd);

/// The Swift runtime's hook for enqueueing a task on the global executor (swift/Runtime/Concurrency.h). SwiftNIO
/// finds it with dlsym; a static Swift runtime is linked with --exclude-libs ALL, which hides it from dlsym, so the
/// daemon sets it here instead. Only a module that calls this function references the hook.
extern void *swift_task_enqueueGlobal_hook;

/// Sets `swift_task_enqueueGlobal_hook` to `hook` when no hook is set; returns whether it set it.
static inline int tb_install_enqueue_global_hook(void *hook) {
    return __atomic_compare_exchange_n(&swift_task_enqueueGlobal_hook, &(void *){NULL}, hook, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}

// A kill -9 at any step of the daemon's work on its key, for the key-move tests (Tests/keys): preloaded into the
// daemon (LD_PRELOAD), it counts each file operation on the state directory outside db/ (where the key record,
// the key file and their temporary files are; SQLite's files are left alone), and every syncfs (the daemon's
// flush of the keyring's files), and the daemon SIGKILLs itself just before operation number TB_KILL_AT. Each operation is also logged to TB_KILL_LOG, so a dry run (TB_KILL_AT=0)
// lists the steps a run with TB_KILL_AT=1, 2, … cuts.
//
//   TB_KILL_ROOT  the state directory (absolute)
//   TB_KILL_AT    the operation to die before (1-based); 0 counts only
//   TB_KILL_LOG   where to append one line per operation: "<n> <operation> <path>"
//
// Test code, built by Tests/keys/keys_test.py; never part of a product.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char root[PATH_MAX];
static size_t root_length;
static long target;
static long counted;
static int log_fd = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void setup(void) {
    const char *value = getenv("TB_KILL_ROOT");
    if (value == NULL || value[0] != '/' || strlen(value) >= sizeof(root) - 1) return;
    strcpy(root, value);
    root_length = strlen(root);
    while (root_length > 1 && root[root_length - 1] == '/') root[--root_length] = '\0';
    target = atol(getenv("TB_KILL_AT") ? getenv("TB_KILL_AT") : "0");
    const char *log = getenv("TB_KILL_LOG");
    if (log != NULL) log_fd = (int)syscall(SYS_openat, AT_FDCWD, log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

// Whether `path` is in the state directory (or is it) and not in its db/ directory.
static int watched(const char *path) {
    if (root_length == 0 || path == NULL || strncmp(path, root, root_length) != 0) return 0;
    const char *rest = path + root_length;
    if (*rest != '\0' && *rest != '/') return 0;
    return strncmp(rest, "/db/", 4) != 0 && strcmp(rest, "/db") != 0;
}

static void step(const char *operation, const char *path) {
    pthread_mutex_lock(&lock);
    long number = ++counted;
    if (log_fd >= 0) {
        char line[PATH_MAX + 64];
        int length = snprintf(line, sizeof(line), "%ld %s %s\n", number, operation, path);
        if (length > 0) (void)!write(log_fd, line, (size_t)length);
    }
    if (number == target) kill(getpid(), SIGKILL);
    pthread_mutex_unlock(&lock);
}

static const char *descriptor_path(int fd, char *buffer, size_t size) {
    char link[64];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t length = readlink(link, buffer, size - 1);
    if (length <= 0) return NULL;
    buffer[length] = '\0';
    return buffer;
}

#define REAL(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

// open's mode, when the flags say one was passed.
#define MODE_ARGUMENT(flags, mode)                                                                                   \
    do {                                                                                                             \
        if ((flags) & (O_CREAT | O_TMPFILE)) {                                                                       \
            va_list arguments;                                                                                       \
            va_start(arguments, flags);                                                                              \
            (mode) = (mode_t)va_arg(arguments, int);                                                                 \
            va_end(arguments);                                                                                       \
        }                                                                                                            \
    } while (0)

static int created(const char *path, int flags) {
    if ((flags & O_CREAT) && watched(path)) step("create", path);
    return flags;
}

int open(const char *path, int flags, ...) {
    mode_t mode = 0;
    MODE_ARGUMENT(flags, mode);
    return REAL(open)(path, created(path, flags), mode);
}

int open64(const char *path, int flags, ...) {
    mode_t mode = 0;
    MODE_ARGUMENT(flags, mode);
    return REAL(open64)(path, created(path, flags), mode);
}

int rename(const char *from, const char *to) {
    if (watched(from) || watched(to)) step("rename", to);
    return REAL(rename)(from, to);
}

int unlink(const char *path) {
    if (watched(path)) step("unlink", path);
    return REAL(unlink)(path);
}

int fsync(int fd) {
    char buffer[PATH_MAX];
    const char *path = descriptor_path(fd, buffer, sizeof(buffer));
    if (watched(path)) step("fsync", path);
    return REAL(fsync)(fd);
}

int fdatasync(int fd) {
    char buffer[PATH_MAX];
    const char *path = descriptor_path(fd, buffer, sizeof(buffer));
    if (watched(path)) step("fdatasync", path);
    return REAL(fdatasync)(fd);
}

int syncfs(int fd) {
    char buffer[PATH_MAX];
    const char *path = descriptor_path(fd, buffer, sizeof(buffer));
    step("syncfs", path ? path : "?");
    return REAL(syncfs)(fd);
}

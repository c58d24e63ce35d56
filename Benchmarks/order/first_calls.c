// The functions a program runs, in the order they first run: what scripts/order-file.sh hands the linker so that
// the daemon's start-up and hot path sit together in a few megabytes of its executable.
//
//   first_calls ENTRIES OUTPUT -- PROGRAM ARGS...
//
// ENTRIES holds one hexadecimal function address per line, relative to the executable (as `nm` prints them). The
// program runs under ptrace with a breakpoint (int3) on each of those entries, set through /proc/PID/mem while it
// is stopped at exec; the first thread to reach one writes its address to OUTPUT, the original byte goes back and
// the thread goes on, so each function costs one stop. Every thread is followed (PTRACE_O_TRACECLONE); other
// signals are passed on, so SIGINT or SIGTERM to the program ends the trace as it ends the program.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t *entries; static unsigned char *original, *armed; static size_t count;

static int compare(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b; return x < y ? -1 : x > y;
}
static long find(uint64_t address) {
    size_t low = 0, high = count;
    while (low < high) { size_t mid = (low + high) / 2; if (entries[mid] < address) low = mid + 1; else high = mid; }
    return low < count && entries[low] == address ? (long)low : -1;
}
static uint64_t load_address(pid_t pid, const char *program) {
    char path[64], line[4096], real[4096]; snprintf(path, sizeof path, "/proc/%d/maps", pid);
    if (!realpath(program, real)) return 0;
    FILE *maps = fopen(path, "r"); uint64_t base = 0;
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long start, offset; char perms[8], name[4096] = "";
        if (sscanf(line, "%lx-%*x %7s %lx %*s %*s %4095s", &start, perms, &offset, name) >= 3 && offset == 0
            && strcmp(name, real) == 0) { base = start; break; }
    }
    if (maps) fclose(maps);
    return base;
}

int main(int argc, char **argv) {
    if (argc < 5 || strcmp(argv[3], "--") != 0) { fprintf(stderr, "usage: first_calls ENTRIES OUTPUT -- PROGRAM ARGS...\n"); return 64; }
    FILE *list = fopen(argv[1], "r"); if (!list) { perror(argv[1]); return 66; }
    size_t capacity = 1 << 18; entries = malloc(capacity * sizeof *entries); char line[256];
    while (fgets(line, sizeof line, list)) {
        if (count == capacity) entries = realloc(entries, (capacity *= 2) * sizeof *entries);
        entries[count++] = strtoull(line, NULL, 16);
    }
    fclose(list); qsort(entries, count, sizeof *entries, compare);
    size_t unique = 0; for (size_t i = 0; i < count; i++) if (i == 0 || entries[i] != entries[unique - 1]) entries[unique++] = entries[i];
    count = unique; original = calloc(count, 1); armed = calloc(count, 1);
    FILE *output = fopen(argv[2], "w"); if (!output) { perror(argv[2]); return 73; }

    pid_t child = fork();
    if (child == 0) { ptrace(PTRACE_TRACEME, 0, 0, 0); execv(argv[4], argv + 4); perror(argv[4]); _exit(127); }
    int status; waitpid(child, &status, 0);  // stopped at exec: the executable is mapped, nothing of it has run
    ptrace(PTRACE_SETOPTIONS, child, 0, PTRACE_O_TRACECLONE | PTRACE_O_EXITKILL);
    uint64_t base = load_address(child, argv[4]);
    if (!base) { fprintf(stderr, "first_calls: cannot find %s in the child's maps\n", argv[4]); return 70; }
    char memory_path[64]; snprintf(memory_path, sizeof memory_path, "/proc/%d/mem", child);
    int memory = open(memory_path, O_RDWR);
    unsigned char trap = 0xCC;
    for (size_t i = 0; i < count; i++) {
        if (pread(memory, &original[i], 1, (off_t)(base + entries[i])) == 1
            && pwrite(memory, &trap, 1, (off_t)(base + entries[i])) == 1) armed[i] = 1;
    }
    ptrace(PTRACE_CONT, child, 0, 0);
    size_t hits = 0; int live = 1;
    while (live > 0) {
        pid_t thread = waitpid(-1, &status, __WALL);
        if (thread < 0) { if (errno == EINTR) continue; break; }
        if (WIFEXITED(status) || WIFSIGNALED(status)) { if (thread == child) live = 0; continue; }
        if (!WIFSTOPPED(status)) continue;
        int signal = WSTOPSIG(status), event = status >> 16, deliver = 0;
        if (event == PTRACE_EVENT_CLONE) {
        } else if (signal == SIGTRAP) {
            struct user_regs_struct registers; ptrace(PTRACE_GETREGS, thread, 0, &registers);
            long index = find(registers.rip - 1 - base);
            if (index >= 0) {
                if (armed[index]) {
                    pwrite(memory, &original[index], 1, (off_t)(base + entries[index])); armed[index] = 0;
                    fprintf(output, "%lx\n", (unsigned long)entries[index]); hits++;
                }
                registers.rip -= 1; ptrace(PTRACE_SETREGS, thread, 0, &registers);
            } else deliver = signal;
        } else if (signal != SIGSTOP) deliver = signal;
        ptrace(PTRACE_CONT, thread, 0, deliver);
    }
    fclose(output);
    fprintf(stderr, "first_calls: %zu of %zu functions entered\n", hits, count);
    return 0;
}

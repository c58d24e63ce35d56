// How long one load takes when it misses the first caches: what tells one run's machine from another's in
// scripts/bench.sh. The same kind of 2-vCPU VM has run on CPUs with and without AVX-512, and on one host a load over
// 4 MiB took 36 ns or 187 ns within the hour, as its neighbours used the shared cache or not. The broker's refresh,
// which runs 465 KiB of code each time, slowed three to four times on such days, the C floors by less than two
// (BENCHMARKS.md, sixteenth pass).
//
//   memory_latency   prints one JSON object: nanoseconds per dependent load over 4 MiB and over 64 MiB
//
// Each working set is one random cycle of pointers (Sattolo's shuffle), walked so that every load waits for the one
// before it; a walk of the whole cycle first puts its pages in place.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static uint64_t state = 0x9e3779b97f4a7c15u;
static uint64_t next_random(void) { // xorshift64*
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545f4914f6cdd1du;
}

static double nanoseconds_per_load(size_t bytes, long loads) {
    size_t count = bytes / sizeof(void *);
    void **slots = malloc(count * sizeof(void *));
    size_t *order = malloc(count * sizeof(size_t));
    if (!slots || !order) { perror("malloc"); exit(1); }
    for (size_t i = 0; i < count; i++) order[i] = i;
    for (size_t i = count - 1; i > 0; i--) { // Sattolo: one cycle through every slot
        size_t j = next_random() % i, kept = order[i];
        order[i] = order[j];
        order[j] = kept;
    }
    for (size_t i = 0; i < count; i++) slots[order[i]] = &slots[order[(i + 1) % count]];
    void **cursor = &slots[order[0]];
    for (size_t i = 0; i < count; i++) cursor = *cursor;
    double start = now_ns();
    for (long i = 0; i < loads; i++) cursor = *cursor;
    double elapsed = now_ns() - start;
    if (cursor == NULL) puts(""); // keeps the walk from being optimized away
    free(slots);
    free(order);
    return elapsed / loads;
}

int main(void) {
    double small = nanoseconds_per_load(4u << 20, 2000000);
    double large = nanoseconds_per_load(64u << 20, 2000000);
    printf("{\"load_4mib_ns\":%.1f,\"load_64mib_ns\":%.1f}\n", small, large);
    return 0;
}

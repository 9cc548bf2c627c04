/* This machine's floor for a cross-process round trip, without Python.
 *
 *   floor_pingpong spin  ITER BYTES   both sides spin on a shared cache line
 *   floor_pingpong futex ITER BYTES   both sides sleep on a futex word
 *
 * A parent and a forked child bounce a turn counter; with BYTES > 0 each
 * side also copies BYTES of payload through shared memory every hop.  Prints
 * one round-trip time in ns per line (after warm-up) for the caller to
 * summarise, so the statistics are computed exactly as for every other mode.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Alignas(64) uint32_t turn; /* odd: child's turn, even: parent's */
    _Alignas(64) uint8_t request[4096];
    _Alignas(64) uint8_t response[4096];
} shared_t;

static int use_futex;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void wait_turn(uint32_t *turn, uint32_t want) {
    for (;;) {
        uint32_t seen = __atomic_load_n(turn, __ATOMIC_ACQUIRE);
        if (seen == want) return;
        if (use_futex)
            syscall(SYS_futex, turn, FUTEX_WAIT, seen, NULL, NULL, 0);
        else
            __builtin_ia32_pause();
    }
}

static void give_turn(uint32_t *turn, uint32_t value) {
    __atomic_store_n(turn, value, __ATOMIC_RELEASE);
    if (use_futex) syscall(SYS_futex, turn, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[1], "spin") && strcmp(argv[1], "futex"))) {
        fprintf(stderr, "usage: %s spin|futex ITERATIONS BYTES\n", argv[0]);
        return 2;
    }
    use_futex = strcmp(argv[1], "futex") == 0;
    long iterations = atol(argv[2]), bytes = atol(argv[3]), warmup = iterations / 10;
    if (bytes < 0 || bytes > 4096) return 2;
    shared_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) return 1;
    uint8_t local[4096] = {1};
    int multi_cpu = sysconf(_SC_NPROCESSORS_ONLN) > 1;
    pid_t child = fork();
    if (child == 0) {
        if (multi_cpu) pin(1);
        for (long i = 0; i < warmup + iterations; i++) {
            wait_turn(&s->turn, 2 * (uint32_t)i + 1);
            memcpy(local, s->request, bytes);
            memcpy(s->response, local, bytes);
            give_turn(&s->turn, 2 * (uint32_t)i + 2);
        }
        _exit(0);
    }
    if (multi_cpu) pin(0);
    int64_t *times = malloc(sizeof(int64_t) * iterations);
    for (long i = 0; i < warmup + iterations; i++) {
        int64_t start = now_ns();
        memcpy(s->request, local, bytes);
        give_turn(&s->turn, 2 * (uint32_t)i + 1);
        wait_turn(&s->turn, 2 * (uint32_t)i + 2);
        memcpy(local, s->response, bytes);
        if (i >= warmup) times[i - warmup] = now_ns() - start;
    }
    waitpid(child, NULL, 0);
    for (long i = 0; i < iterations; i++) printf("%lld\n", (long long)times[i]);
    return 0;
}

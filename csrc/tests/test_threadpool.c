/* The kernel threads (threadpool.c), alone: under TSan (`make tsan`) and
 * ASan/UBSan (`make asan`).  Jobs of every size on 1-4 threads, counts
 * changed between jobs, two callers at once (one runs its tasks itself),
 * errors, worker scratch, workers joined (/proc/self/task) when the count
 * drops and at exit, a forked child running its own jobs.  Each task writes its own slots; the caller reads
 * them all after the job: TSan reports a missing happens-before edge.
 * Usage: test_threadpool [jobs] */

#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "threadpool.h"

#define MAX_TASKS 40
#define SLOTS 64

static long worker_tasks; /* tasks the workers ran: the test must reach them */

struct job {
    int64_t tasks;
    uint32_t seed;
    int fail_task; /* -1: none */
    uint32_t out[MAX_TASKS][SLOTS];
    int ran[MAX_TASKS];
    int by[MAX_TASKS];
};

static int task(void *context, int64_t t, int participant)
{
    struct job *j = context;
    j->ran[t]++;
    j->by[t] = participant;
    if (participant > 0)
        __atomic_fetch_add(&worker_tasks, 1, __ATOMIC_RELAXED);
    uint32_t *scratch = participant > 0 ? nnb_threads_scratch(participant, SLOTS * 4 * (t + 1)) : NULL;
    if (participant > 0 && scratch == NULL)
        return -ENOMEM;
    for (int k = 0; k < SLOTS; k++) {
        uint32_t v = j->seed * 2654435761u + (uint32_t)(t * SLOTS + k);
        if (scratch) { /* through the worker's scratch, so ASan sees its size */
            scratch[SLOTS * t + k] = v;
            v = scratch[SLOTS * t + k];
        }
        j->out[t][k] = v;
    }
    return t == j->fail_task ? -EIO : 0;
}

/* A task that sleeps: the caller cannot take every task before a worker wakes. */
static int slow_task(void *context, int64_t t, int participant)
{
    (void)context, (void)t;
    if (participant > 0)
        __atomic_fetch_add(&worker_tasks, 1, __ATOMIC_RELAXED);
    usleep(2000);
    return 0;
}

static int check_job(struct job *j, int participants)
{
    memset(j->ran, 0, sizeof j->ran);
    memset(j->out, 0, sizeof j->out);
    const int rc = nnb_threads_run(participants, j->tasks, task, j);
    int failed = rc != (j->fail_task >= 0 && j->fail_task < j->tasks ? -EIO : 0);
    for (int64_t t = 0; t < j->tasks; t++) {
        failed |= j->ran[t] != 1;
        failed |= j->by[t] < 0 || j->by[t] >= participants;
        for (int k = 0; k < SLOTS; k++)
            failed |= j->out[t][k] != j->seed * 2654435761u + (uint32_t)(t * SLOTS + k);
    }
    if (failed)
        fprintf(stderr, "job of %ld tasks on %d: rc %d\n", (long)j->tasks, participants, rc);
    return failed;
}

/* Threads of this process named as the pool names its workers (TSan keeps
 * a thread of its own, so a plain count would not do). */
static int kernel_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        char path[300], name[32] = "";
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            n += fgets(name, sizeof name, f) != NULL && strncmp(name, "nnb-kernel-", 11) == 0;
            fclose(f);
        }
    }
    if (d)
        closedir(d);
    return n;
}

struct caller {
    int jobs, participants, failed;
    uint32_t seed;
};

static void *call(void *arg)
{
    struct caller *c = arg;
    struct job *j = calloc(1, sizeof *j);
    for (int i = 0; i < c->jobs; i++) {
        j->tasks = 1 + (c->seed + (uint32_t)i) % MAX_TASKS;
        j->seed = c->seed * 7 + (uint32_t)i;
        j->fail_task = i % 17 == 3 ? (int)(j->tasks / 2) : -1;
        c->failed |= check_job(j, c->participants);
    }
    free(j);
    return NULL;
}

/* Registered before the pool's own exit hook, so it runs after it: by then
 * no worker may be left. */
static void no_workers_at_exit(void)
{
    if (kernel_threads() != 0) {
        fprintf(stderr, "%d kernel threads left at exit\n", kernel_threads());
        _exit(1);
    }
}

int main(int argc, char **argv)
{
    atexit(no_workers_at_exit);
    const int jobs = argc > 1 ? atoi(argv[1]) : 2000;
    int failed = 0;

    failed |= nnb_threads_set(0) != -EINVAL || nnb_threads_set(NNB_THREADS_MAX + 1) != -EINVAL;
    failed |= nnb_threads_count() != 1 || nnb_threads_alive() != 0;

    /* one thread: every task on the caller, no worker started */
    struct job *j = calloc(1, sizeof *j);
    j->tasks = 5, j->seed = 1, j->fail_task = -1;
    failed |= check_job(j, 4);
    failed |= nnb_threads_alive() != 0;

    /* counts changed between jobs; participants below and above the count */
    const int counts[] = {2, 3, 4, 2, 1, 4};
    for (int c = 0; c < 6; c++) {
        failed |= nnb_threads_set(counts[c]) != 0;
        for (int i = 0; i < jobs / 6; i++) {
            j->tasks = 1 + i % MAX_TASKS, j->seed = (uint32_t)(c * 1000 + i);
            j->fail_task = i % 13 == 5 ? i % 7 : -1;
            failed |= check_job(j, 1 + i % 5);
        }
        if (nnb_threads_alive() > counts[c] - 1) {
            fprintf(stderr, "%d workers alive at count %d\n", nnb_threads_alive(), counts[c]);
            failed = 1;
        }
    }

    /* two callers at once: whichever finds the workers busy runs alone */
    failed |= nnb_threads_set(3) != 0;
    struct caller callers[2] = {{jobs / 4, 3, 0, 11}, {jobs / 4, 2, 0, 23}};
    pthread_t other;
    pthread_create(&other, NULL, call, &callers[1]);
    call(&callers[0]);
    pthread_join(other, NULL);
    failed |= callers[0].failed | callers[1].failed;

    failed |= kernel_threads() != 2;
    failed |= nnb_threads_run(3, 16, slow_task, NULL) != 0;
    if (__atomic_load_n(&worker_tasks, __ATOMIC_RELAXED) == 0) {
        fprintf(stderr, "no task ran on a worker\n");
        failed = 1;
    }
#ifndef __SANITIZE_THREAD__ /* TSan cannot start threads in a forked child */
    /* a forked child starts its own workers; the parent's keep working */
    fflush(stderr);
    const pid_t child = fork();
    if (child == 0) {
        int bad = nnb_threads_alive() != 0;
        struct caller c = {jobs / 10 + 1, 3, 0, 5};
        call(&c);
        bad |= c.failed || nnb_threads_alive() != 2;
        _exit(bad);
    }
    int status = 0;
    failed |= child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
              WEXITSTATUS(status) != 0;
#endif
    j->tasks = 9, j->seed = 99, j->fail_task = -1;
    failed |= check_job(j, 3);

    /* count 1 joins every worker: the process is back to its own threads */
    failed |= nnb_threads_set(1) != 0;
    failed |= nnb_threads_alive() != 0;
    if (kernel_threads() != 0) {
        fprintf(stderr, "%d kernel threads left\n", kernel_threads());
        failed = 1;
    }
    /* and a later count starts them again */
    failed |= nnb_threads_set(2) != 0;
    failed |= check_job(j, 2);
    failed |= nnb_threads_alive() != 1; /* left running: exit stops it */
    free(j);
    printf("threadpool: %s\n", failed ? "FAILED" : "ok");
    return failed;
}

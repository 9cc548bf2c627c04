/* The process's kernel threads (threadpool.h).
 *
 * One pool per process.  A parallel step (a job) is published to the
 * workers through one 64-bit word, `claim`: the job's generation in the
 * high half, the next task to take in the low half (CLOSED while the job's
 * fields are being written).  Taking a task is a compare-and-swap of that
 * word from (gen, t) to (gen, t + 1), so a task is taken once, and only by
 * a thread that read the fields of that very job (below).  Each finished
 * task adds one to `done`; the caller returns once done reaches the job's
 * task count.  Workers sleep on the futex word `wake` between jobs, after
 * spinning SPIN_NS for the next one (a model's heavy steps come a few
 * microseconds apart); every wait is bounded and re-checks its condition.
 *
 * Memory ordering (C11 atomics; the futex only puts threads to sleep, it
 * orders nothing, so TSan sees every edge):
 *   - Publishing a job (the caller holds `lock`, so it is claim's only
 *     writer of generations): store claim = (gen, CLOSED) relaxed, then the
 *     job's fields, each a release store, then claim = (gen, 0) with
 *     release.  A worker's acquire load of (gen, t) with t open therefore
 *     sees the fields of gen.
 *   - A worker reads claim (acquire), then the fields (acquire loads), then
 *     takes a task by CAS (acq_rel) from the claim value it read.  If a
 *     field it read was already the next job's, that load synchronised
 *     with a release store made after the closing store, so the CAS sees
 *     the closing store (a generation it does not expect) and fails: a
 *     seqlock's reader check, with release/acquire pairs instead of fences
 *     (TSan models those).  A task it takes is of the job whose fields it
 *     read.
 *   - A task's writes (its slice of the output) happen before its
 *     fetch_add on `done` (acq_rel); the caller's acquire load that sees
 *     done == tasks sees every slice.  No task of a job is in flight once
 *     done == tasks (a task is counted when finished), so the caller may
 *     close claim and reuse the fields for the next job at once, while a
 *     late worker still holds the old values: its CAS fails.
 *   - Sleeping: a worker raises `sleepers` (seq_cst), re-reads `wake`, and
 *     futex-waits on the value it saw; the caller bumps `wake` (seq_cst)
 *     and wakes only when it then reads sleepers > 0.  Either the worker
 *     sees the bump or the caller sees the sleeper (seq_cst total order),
 *     and the futex refuses to sleep on a changed word.  The caller's own
 *     wait on `done` pairs with `caller_waiting` the same way.
 *   - `stop` (release, with a bump of `wake`) ends the workers; the stopper
 *     holds `lock` and joins them, so their scratch and slots are its own
 *     afterwards.
 *
 * Fork: a child has only the forking thread.  pthread_atfork takes `lock`
 * before fork (no job in flight, no resize half done) and, in the child,
 * forgets the workers (their threads do not exist there; their scratch is
 * freed) and releases it: the child starts its own workers at its first
 * parallel step.  At exit the workers are stopped and joined (a bounded wait
 * for the lock; exit goes on without it). */

#define _GNU_SOURCE

#include "threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CLOSED 0xffffffffu
/* A worker spins this long for the next job before it sleeps: a model's
 * parallel steps are a few microseconds apart, a futex wake-up costs tens.
 * Longer spins cost more than they saved on the busy 2-core machine this
 * was measured on (pose_detection on 2 threads: 1.20x one thread's p50 with
 * 100 us here and 200 us below, 1.10x with 20 us and 20 us, load ~8.5). */
#define SPIN_NS 20000
/* The caller spins this long for the workers' last slices before it sleeps. */
#define WAIT_SPIN_NS 20000
/* Each futex wait is bounded: a lost wake-up costs at most this. */
#define SLEEP_NS 50000000
#define EXIT_LOCK_NS 1000000000

struct worker {
    pthread_t thread;
    int index;
    uint32_t wake_seen; /* wake's value when it started */
    void *scratch;      /* the worker's own; only it touches it while it runs */
    int64_t scratch_bytes;
};

static struct {
    pthread_mutex_t lock; /* held by a job's caller, a count change, fork and exit */
    int wanted;           /* participants asked for (lock) */
    _Atomic int started;  /* workers 1..started exist (written with lock held) */
    _Atomic uint64_t claim;
    _Atomic uint32_t wake;
    _Atomic uint32_t done;
    _Atomic int sleepers;
    _Atomic int caller_waiting;
    _Atomic int rc;
    _Atomic int stop;
    /* the job, valid while claim's generation is its own (see above) */
    _Atomic(nnb_task_fn) fn;
    _Atomic(void *) context;
    _Atomic int64_t tasks;
    _Atomic int participants;
    struct worker workers[NNB_THREADS_MAX];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wanted = 1, .claim = CLOSED};

static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec t = {timeout_ns / 1000000000, timeout_ns % 1000000000};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, &t, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int count)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

static void record(int rc)
{
    int none = 0;
    if (rc)
        atomic_compare_exchange_strong_explicit(&pool.rc, &none, rc, memory_order_relaxed,
                                                memory_order_relaxed);
}

/* A task finished: count it, and wake the caller if it was the last. */
static void finish(int64_t tasks)
{
    const uint32_t done = atomic_fetch_add_explicit(&pool.done, 1, memory_order_seq_cst) + 1;
    if (done == (uint32_t)tasks && atomic_load_explicit(&pool.caller_waiting, memory_order_seq_cst))
        futex_wake(&pool.done, 1);
}

/* Takes the next task of generation gen from claim's value *seen (updated
 * on failure); -1 once gen's tasks are all taken or gen is over. */
static int64_t take(uint64_t *seen, uint32_t gen, int64_t tasks)
{
    while ((uint32_t)(*seen >> 32) == gen && (uint32_t)*seen != CLOSED &&
           (int64_t)(uint32_t)*seen < tasks)
        if (atomic_compare_exchange_weak_explicit(&pool.claim, seen, *seen + 1,
                                                  memory_order_acq_rel, memory_order_acquire))
            return (int64_t)(uint32_t)(*seen);
    return -1;
}

/* Waits until wake differs from *seen or stop is set; *seen becomes wake's value. */
static void wait_for_job(uint32_t *seen)
{
    const int64_t start = now_ns();
    for (int spins = 0;; spins++) {
        if (atomic_load_explicit(&pool.wake, memory_order_acquire) != *seen)
            goto woken;
        if ((spins & 63) == 63 && now_ns() - start > SPIN_NS)
            break;
        cpu_relax();
    }
    atomic_fetch_add_explicit(&pool.sleepers, 1, memory_order_seq_cst);
    while (atomic_load_explicit(&pool.wake, memory_order_seq_cst) == *seen)
        futex_wait(&pool.wake, *seen, SLEEP_NS);
    atomic_fetch_sub_explicit(&pool.sleepers, 1, memory_order_seq_cst);
woken:
    *seen = atomic_load_explicit(&pool.wake, memory_order_acquire);
}

static void *work(void *arg)
{
    struct worker *self = arg;
    uint32_t seen = self->wake_seen;
    for (;;) {
        wait_for_job(&seen);
        if (atomic_load_explicit(&pool.stop, memory_order_acquire))
            break;
        uint64_t claim = atomic_load_explicit(&pool.claim, memory_order_acquire);
        if ((uint32_t)claim == CLOSED)
            continue; /* a job being written: its wake bump follows */
        const nnb_task_fn fn = atomic_load_explicit(&pool.fn, memory_order_acquire);
        void *const context = atomic_load_explicit(&pool.context, memory_order_acquire);
        const int64_t tasks = atomic_load_explicit(&pool.tasks, memory_order_acquire);
        const int participants = atomic_load_explicit(&pool.participants, memory_order_acquire);
        if (self->index >= participants)
            continue; /* this job wants fewer threads */
        const uint32_t gen = (uint32_t)(claim >> 32);
        for (int64_t task; (task = take(&claim, gen, tasks)) >= 0;) {
            record(fn(context, task, self->index));
            finish(tasks);
        }
    }
    free(self->scratch);
    self->scratch = NULL;
    self->scratch_bytes = 0;
    return NULL;
}

/* Stops and joins every worker (lock held). */
static void stop_workers(void)
{
    const int started = atomic_load_explicit(&pool.started, memory_order_relaxed);
    if (started == 0)
        return;
    atomic_store_explicit(&pool.stop, 1, memory_order_release);
    atomic_fetch_add_explicit(&pool.wake, 1, memory_order_seq_cst);
    futex_wake(&pool.wake, INT_MAX);
    for (int i = 1; i <= started; i++)
        pthread_join(pool.workers[i].thread, NULL);
    atomic_store_explicit(&pool.started, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.stop, 0, memory_order_relaxed);
}

static void before_fork(void) { pthread_mutex_lock(&pool.lock); }

static void after_fork_parent(void) { pthread_mutex_unlock(&pool.lock); }

static void after_fork_child(void)
{
    const int started = atomic_load_explicit(&pool.started, memory_order_relaxed);
    for (int i = 1; i <= started; i++) { /* threads gone; their memory was copied */
        free(pool.workers[i].scratch);
        pool.workers[i].scratch = NULL;
        pool.workers[i].scratch_bytes = 0;
    }
    atomic_store_explicit(&pool.started, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.sleepers, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.caller_waiting, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.stop, 0, memory_order_relaxed);
    pthread_mutex_unlock(&pool.lock); /* this thread took it in before_fork */
}

static void at_exit(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += EXIT_LOCK_NS / 1000000000;
    if (pthread_mutex_timedlock(&pool.lock, &until) != 0)
        return; /* a step still running elsewhere: exit ends its threads */
    stop_workers();
    pthread_mutex_unlock(&pool.lock);
}

static void install_hooks(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    atexit(at_exit);
}

/* Starts workers up to wanted - 1 (lock held); stops at the first failure. */
static void start_workers(void)
{
    int started = atomic_load_explicit(&pool.started, memory_order_relaxed);
    if (started >= pool.wanted - 1)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* signals stay with the app's threads */
    while (started < pool.wanted - 1) {
        struct worker *w = &pool.workers[started + 1];
        w->index = started + 1;
        w->wake_seen = atomic_load_explicit(&pool.wake, memory_order_relaxed);
        if (pthread_create(&w->thread, NULL, work, w) != 0)
            break;
        char name[16]; /* named here, so that it has its name once it is counted */
        snprintf(name, sizeof name, "nnb-kernel-%d", w->index);
        pthread_setname_np(w->thread, name);
        started++;
        atomic_store_explicit(&pool.started, started, memory_order_relaxed);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int nnb_threads_set(int count)
{
    if (count < 1 || count > NNB_THREADS_MAX)
        return -EINVAL;
    pthread_once(&hooks_once, install_hooks);
    pthread_mutex_lock(&pool.lock);
    if (atomic_load_explicit(&pool.started, memory_order_relaxed) > count - 1)
        stop_workers();
    pool.wanted = count;
    pthread_mutex_unlock(&pool.lock);
    return 0;
}

int nnb_threads_count(void)
{
    pthread_mutex_lock(&pool.lock);
    const int count = pool.wanted;
    pthread_mutex_unlock(&pool.lock);
    return count;
}

int nnb_threads_alive(void) { return atomic_load_explicit(&pool.started, memory_order_relaxed); }

void *nnb_threads_scratch(int participant, int64_t bytes)
{
    if (participant < 1 || participant >= NNB_THREADS_MAX || bytes < 0)
        return NULL;
    struct worker *w = &pool.workers[participant];
    if (w->scratch_bytes < bytes) {
        void *grown = NULL;
        if (posix_memalign(&grown, 64, (size_t)bytes) != 0)
            return NULL;
        free(w->scratch);
        w->scratch = grown;
        w->scratch_bytes = bytes;
    }
    return w->scratch;
}

static int run_inline(int64_t tasks, nnb_task_fn fn, void *context)
{
    int first = 0;
    for (int64_t t = 0; t < tasks; t++) {
        const int rc = fn(context, t, 0);
        if (rc && !first)
            first = rc;
    }
    return first;
}

/* One job on the workers (lock held, helpers >= 1 workers started). */
static int run_job(int participants, int64_t tasks, nnb_task_fn fn, void *context)
{
    const uint64_t old = atomic_load_explicit(&pool.claim, memory_order_relaxed);
    const uint32_t gen = (uint32_t)(old >> 32) + 1;
    atomic_store_explicit(&pool.claim, (uint64_t)gen << 32 | CLOSED, memory_order_relaxed);
    atomic_store_explicit(&pool.fn, fn, memory_order_release);
    atomic_store_explicit(&pool.context, context, memory_order_release);
    atomic_store_explicit(&pool.tasks, tasks, memory_order_release);
    atomic_store_explicit(&pool.participants, participants, memory_order_release);
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.rc, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.claim, (uint64_t)gen << 32, memory_order_release);
    atomic_fetch_add_explicit(&pool.wake, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&pool.sleepers, memory_order_seq_cst) > 0)
        futex_wake(&pool.wake, INT_MAX);

    uint64_t claim = (uint64_t)gen << 32;
    for (int64_t task; (task = take(&claim, gen, tasks)) >= 0;) {
        record(fn(context, task, 0));
        finish(tasks);
    }
    /* The rest are running on workers that took them: spin, then sleep. */
    const int64_t start = now_ns();
    for (int spins = 0;; spins++) {
        if (atomic_load_explicit(&pool.done, memory_order_acquire) == (uint32_t)tasks)
            return atomic_load_explicit(&pool.rc, memory_order_relaxed);
        if ((spins & 63) == 63 && now_ns() - start > WAIT_SPIN_NS)
            break;
        cpu_relax();
    }
    atomic_store_explicit(&pool.caller_waiting, 1, memory_order_seq_cst);
    for (;;) {
        const uint32_t done = atomic_load_explicit(&pool.done, memory_order_seq_cst);
        if (done == (uint32_t)tasks)
            break;
        futex_wait(&pool.done, done, SLEEP_NS);
    }
    atomic_store_explicit(&pool.caller_waiting, 0, memory_order_relaxed);
    return atomic_load_explicit(&pool.rc, memory_order_relaxed);
}

int nnb_threads_run(int participants, int64_t tasks, nnb_task_fn fn, void *context)
{
    if (tasks <= 0)
        return 0;
    if (participants > 1 && tasks > 1 && tasks < CLOSED &&
        pthread_mutex_trylock(&pool.lock) == 0) {
        if (pool.wanted > 1) {
            pthread_once(&hooks_once, install_hooks);
            start_workers();
        }
        int helpers = atomic_load_explicit(&pool.started, memory_order_relaxed);
        if (helpers > pool.wanted - 1)
            helpers = pool.wanted - 1;
        if (helpers > participants - 1)
            helpers = participants - 1;
        if (helpers > 0) {
            const int rc = run_job(helpers + 1, tasks, fn, context);
            pthread_mutex_unlock(&pool.lock);
            return rc;
        }
        pthread_mutex_unlock(&pool.lock);
    }
    return run_inline(tasks, fn, context);
}

/* The process's kernel threads (threadpool.c): persistent workers that
 * take the slices of one parallel step at a time from a caller, which
 * works on them too.  C owns the mechanism (start, wake, claim, wait,
 * stop); nnburst/cpu/threads.py owns the count (one by default).
 *
 * A step's slices are claimed one at a time from a shared counter, the
 * caller included: a worker the scheduler has not woken yet leaves its
 * slice to whoever is free, so a busy machine costs the caller at most its
 * own work, never a wait for a thread that has not started.  Each slice is
 * computed whole by one thread with the same code as without threads, so
 * results do not depend on the count or on which thread took which slice.
 *
 * Every function returns 0 (or a count) or a negative errno (status.h). */
#ifndef NNBURST_THREADPOOL_H
#define NNBURST_THREADPOOL_H

#include <stdint.h>

/* cffi cdef begin */
/* The most threads a step may use (the caller and NNB_THREADS_MAX - 1 workers). */
#define NNB_THREADS_MAX 64
/* The threads a parallel step may use at most, the caller included:
 * count - 1 workers.  1 stops every worker (joined before this returns);
 * a larger count starts the missing ones lazily, at the first parallel step
 * that wants them.  Changing the count joins the workers past it.  Waits
 * for a parallel step in flight on another thread to end.  -EINVAL for a
 * count outside [1, NNB_THREADS_MAX]. */
int nnb_threads_set(int count);
/* The count last set (1 until then). */
int nnb_threads_count(void);
/* Workers whose threads exist now (named nnb-kernel-<n>). */
int nnb_threads_alive(void);
/* cffi cdef end */

/* One slice of a parallel step: task in [0, tasks), run by participant
 * (0: the caller, 1..: a worker); 0 or a negative errno. */
typedef int (*nnb_task_fn)(void *context, int64_t task, int participant);

/* Runs fn over tasks [0, tasks) on up to `participants` threads, the
 * caller one of them, and returns when all are done: the first error
 * seen (any task's), else 0.  Every task runs exactly once, each on one
 * thread; the caller runs them all itself when the count is 1, when
 * another thread's step holds the workers, or when none could start. */
int nnb_threads_run(int participants, int64_t tasks, nnb_task_fn fn, void *context);

/* Inside a task: participant's own scratch of at least bytes, 64-byte
 * aligned (a worker's grows and is kept until it stops); NULL for the
 * caller (participant 0: it has its own) or when memory cannot be had. */
void *nnb_threads_scratch(int participant, int64_t bytes);

#endif /* NNBURST_THREADPOOL_H */

/* The C plan's deadline (plan.c, nnb_plan_run): read before every step, a
 * run past it stops with -ETIMEDOUT between two steps, none after it run.
 * Steps are FILLs of an arena region each (step i writes i + 1 into region
 * i), so what ran is read back from the arena.  Usage: test_plan_deadline. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan.h"

enum { STEPS = 400, REGION = 1 << 12 }; /* floats per region: a step of a few us */

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* How many regions hold their step's value (the first that does not ends the count). */
static int ran(const float *arena)
{
    int k = 0;
    while (k < STEPS && arena[(int64_t)k * REGION] == (float)(k + 1) &&
           arena[(int64_t)k * REGION + REGION - 1] == (float)(k + 1))
        k++;
    return k;
}

int main(void)
{
    static nnb_plan_step steps[STEPS];
    static nnb_plan_fill fills[STEPS];
    const int64_t arena_bytes = (int64_t)STEPS * REGION * 4;
    float *arena = malloc((size_t)arena_bytes);
    int failed = arena == NULL;
    for (int i = 0; i < STEPS && !failed; i++) {
        float value = (float)(i + 1);
        memcpy(fills[i].value, &value, 4);
        fills[i].elem_bytes = 4;
        steps[i] = (nnb_plan_step){.kind = NNB_PLAN_FILL, .a = 0, .b = 0,
                                   .out = (int64_t)i * REGION * 4, .count = REGION,
                                   .params = &fills[i]};
    }
    failed |= nnb_plan_check(steps, STEPS, arena_bytes, NULL, 0) != 0;
    if (failed) {
        fprintf(stderr, "test_plan_deadline: setup failed\n");
        return 1;
    }

    /* No deadline (0, or negative), or one far ahead: every step runs. */
    const int64_t none[3] = {0, -1, now_ns() + 3600 * (int64_t)1000000000};
    for (int k = 0; k < 3; k++) {
        memset(arena, 0, (size_t)arena_bytes);
        int64_t start = now_ns();
        failed |= nnb_plan_run(steps, STEPS, arena, arena_bytes, NULL, NULL, 0, none[k]) != 0;
        int64_t whole = now_ns() - start;
        failed |= ran(arena) != STEPS;
        if (k == 0) fprintf(stderr, "test_plan_deadline: %d steps in %lld us\n", STEPS,
                            (long long)(whole / 1000));
    }

    /* A deadline already behind: -ETIMEDOUT before the first step, nothing written. */
    memset(arena, 0, (size_t)arena_bytes);
    failed |= nnb_plan_run(steps, STEPS, arena, arena_bytes, NULL, NULL, 0, now_ns() - 1) !=
              -ETIMEDOUT;
    failed |= ran(arena) != 0;

    /* A deadline passing mid-run: stopped between steps, some done, the rest
     * not touched.  A busy machine may deschedule us across the whole window,
     * so a few tries, each with a window of a few steps' time. */
    int stopped_midway = 0;
    for (int attempt = 0; attempt < 20 && !stopped_midway; attempt++) {
        memset(arena, 0, (size_t)arena_bytes);
        int64_t start = now_ns();
        failed |= nnb_plan_run(steps, STEPS, arena, arena_bytes, NULL, NULL, 0, 0) != 0;
        int64_t whole = now_ns() - start;
        memset(arena, 0, (size_t)arena_bytes);
        int rc = nnb_plan_run(steps, STEPS, arena, arena_bytes, NULL, NULL, 0,
                              now_ns() + whole / 4);
        int done = ran(arena);
        /* Nothing past the first unwritten region either. */
        int untouched = 1;
        for (int k = done; k < STEPS; k++)
            untouched &= arena[(int64_t)k * REGION] == 0.0f;
        failed |= !untouched;
        if (rc == -ETIMEDOUT && done > 0 && done < STEPS)
            stopped_midway = 1;
        else
            failed |= rc != 0 && rc != -ETIMEDOUT;
    }
    failed |= !stopped_midway;
    free(arena);
    if (failed) {
        fprintf(stderr, "test_plan_deadline: FAILED\n");
        return 1;
    }
    fprintf(stderr, "test_plan_deadline: ok\n");
    return 0;
}

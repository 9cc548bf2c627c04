/* The C plan (plan.c) under ASan and UBSan: chains of random steps over
 * buffers allocated at exactly the sizes the tables give, checked against
 * the same arithmetic done here step by step, and tables reaching outside
 * their buffers refused before anything is written.  Usage: test_plan [RUNS]. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static float reference(int kind, float a, float b, float lo, float hi)
{
    float v;
    switch (kind) {
    case NNB_PLAN_ADD: v = a + b; break;
    case NNB_PLAN_SUB: v = a - b; break;
    case NNB_PLAN_MUL: v = a * b; break;
    case NNB_PLAN_DIV: v = a / b; break;
    case NNB_PLAN_MAXIMUM: v = a < b ? b : a; break; /* std::max: a when either is NaN */
    case NNB_PLAN_MINIMUM: v = b < a ? b : a; break; /* std::min */
    case NNB_PLAN_CLAMP: v = a; break;
    default: {
        float g = a + 3.0f;
        g = g < 0.0f ? 0.0f : g;
        g = g > 6.0f ? 6.0f : g;
        v = a * g / 6.0f;
    }
    }
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

static int same(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

/* One random chain: input x (n floats), a one-float constant, steps into the
 * arena, the last into the output. */
static int random_chain(void)
{
    const int64_t n = 1 + rand() % 40, count = 1 + rand() % 12;
    const float bounds[4][2] = {{-INFINITY, INFINITY}, {0, INFINITY}, {-1, 1}, {0, 6}};
    float *x = malloc(sizeof(float) * (size_t)n), *c = malloc(sizeof(float));
    float *out = malloc(sizeof(float) * (size_t)n);
    float *arena = malloc(sizeof(float) * (size_t)(n * count));
    float *want = malloc(sizeof(float) * (size_t)(n * (count + 1)));
    nnb_plan_step *steps = calloc((size_t)count, sizeof *steps);
    for (int64_t k = 0; k < n; k++) x[k] = want[k] = (float)(rand() % 2001 - 1000) / 100.0f;
    c[0] = (float)(rand() % 9 - 4);
    for (int64_t i = 0; i < count; i++) {
        nnb_plan_step *s = &steps[i];
        const float *bound = bounds[rand() % 4];
        s->kind = rand() % (NNB_PLAN_HARD_SWISH + 1);
        s->a = i == 0 ? -1 : (i - 1) * n; /* the previous step's result */
        s->a_step = 1;
        s->b = rand() % 2 ? -2 : -1; /* the constant, or x */
        s->b_step = s->b == -1;
        s->out = i == count - 1 ? -3 : i * n;
        s->count = n;
        s->lo = bound[0];
        s->hi = bound[1];
        for (int64_t k = 0; k < n; k++) {
            float b = s->b == -2 ? c[0] : x[k];
            want[(i + 1) * n + k] = reference(s->kind, want[i * n + k], b, s->lo, s->hi);
        }
    }
    float *tensors[3] = {x, c, out};
    int64_t floats[3] = {n, 1, n};
    int failed = nnb_plan_run(steps, count, arena, n * count, tensors, floats, 3) != 0;
    for (int64_t k = 0; k < n && !failed; k++) failed = !same(out[k], want[count * n + k]);
    /* Reaching one float past a buffer, or a kind that does not exist: refused. */
    nnb_plan_step bad = steps[count - 1];
    bad.count = n + 1;
    failed |= nnb_plan_run(&bad, 1, arena, n * count, tensors, floats, 3) != -EINVAL;
    bad = steps[0];
    bad.out = n * count - n + 1;
    failed |= nnb_plan_run(&bad, 1, arena, n * count, tensors, floats, 3) != -EINVAL;
    bad = steps[0];
    bad.a = -4;
    failed |= nnb_plan_run(&bad, 1, arena, n * count, tensors, floats, 3) != -EINVAL;
    bad = steps[0];
    bad.kind = NNB_PLAN_HARD_SWISH + 1;
    failed |= nnb_plan_run(&bad, 1, arena, n * count, tensors, floats, 3) != -EINVAL;
    free(x), free(c), free(out), free(arena), free(want), free(steps);
    return failed;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 500, failures = 0;
    srand(7);
    for (int r = 0; r < runs; r++) failures += random_chain();
    printf("plan: %d random chains, %d failed\n", runs, failures);
    return failures != 0;
}

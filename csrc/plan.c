/* One C call for a run of float32 elementwise operations (plan.h).
 *
 * The Python executor costs ~1 us per operation before any arithmetic;
 * here a step costs a few nanoseconds plus its loop.  Each step computes
 * exactly what numpy computes for the operation (one IEEE operation per
 * element, no contraction across steps), and the clamp propagates NaN as
 * np.maximum / np.minimum do: a NaN compares false and stays. */

#include "plan.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>

static float *tensor_at(int64_t ref, float *arena, float *const *tensors)
{
    return ref >= 0 ? arena + ref : tensors[-1 - ref];
}

/* Whether ref names floats [ref, ref + floats) inside the arena or the caller's tensor. */
static int fits(int64_t ref, int64_t floats, int64_t arena_floats, const int64_t *tensor_floats,
                int64_t tensor_count)
{
    if (floats < 0)
        return 0;
    if (ref >= 0)
        return ref <= arena_floats && floats <= arena_floats - ref;
    if (ref < -tensor_count)
        return 0;
    return floats <= tensor_floats[-1 - ref];
}

static float clamped(float v, float lo, float hi)
{
    v = v < lo ? lo : v; /* NaN < lo is false: a NaN stays, as in np.maximum */
    return v > hi ? hi : v;
}

/* MAXIMUM / MINIMUM as NNAPI's std::max / std::min: `a` whenever either is NaN
 * (a NaN compares false), as the operations' own kernels compute them. */
static float maximum(float a, float b)
{
    return a < b ? b : a;
}

static float minimum(float a, float b)
{
    return b < a ? b : a;
}

static int check(const nnb_plan_step *s, int64_t arena_floats, const int64_t *tensor_floats,
                 int64_t tensor_count)
{
    int binary = s->kind <= NNB_PLAN_MINIMUM;
    if (s->kind < 0 || s->kind > NNB_PLAN_HARD_SWISH || s->count < 0)
        return 0;
    if ((s->a_step != 0 && s->a_step != 1) || (s->b_step != 0 && s->b_step != 1))
        return 0;
    if (!fits(s->out, s->count, arena_floats, tensor_floats, tensor_count) ||
        !fits(s->a, s->a_step ? s->count : 1, arena_floats, tensor_floats, tensor_count))
        return 0;
    if (binary && !fits(s->b, s->b_step ? s->count : 1, arena_floats, tensor_floats, tensor_count))
        return 0;
    /* An output may overwrite an input element by element only in place. */
    if ((s->out == s->a && !s->a_step) || (binary && s->out == s->b && !s->b_step))
        return 0;
    return 1;
}

int nnb_plan_run(const nnb_plan_step *steps, int64_t count, float *arena,
                 int64_t arena_floats, float *const *tensors, const int64_t *tensor_floats,
                 int64_t tensor_count)
{
    if (count < 0 || arena_floats < 0 || tensor_count < 0 || (count && steps == NULL))
        return -EINVAL;
    for (int64_t i = 0; i < count; i++)
        if (!check(&steps[i], arena_floats, tensor_floats, tensor_count))
            return -EINVAL;
    for (int64_t i = 0; i < count; i++) {
        const nnb_plan_step *s = &steps[i];
        const float *a = tensor_at(s->a, arena, tensors);
        const float *b = s->kind <= NNB_PLAN_MINIMUM ? tensor_at(s->b, arena, tensors) : a;
        float *out = tensor_at(s->out, arena, tensors);
        const int64_t as = s->a_step, bs = s->b_step, n = s->count;
        const float lo = s->lo, hi = s->hi;
        switch (s->kind) {
        case NNB_PLAN_ADD:
            for (int64_t k = 0; k < n; k++)
                out[k] = clamped(a[k * as] + b[k * bs], lo, hi);
            break;
        case NNB_PLAN_SUB:
            for (int64_t k = 0; k < n; k++)
                out[k] = clamped(a[k * as] - b[k * bs], lo, hi);
            break;
        case NNB_PLAN_MUL:
            for (int64_t k = 0; k < n; k++)
                out[k] = clamped(a[k * as] * b[k * bs], lo, hi);
            break;
        case NNB_PLAN_DIV:
            for (int64_t k = 0; k < n; k++)
                out[k] = clamped(a[k * as] / b[k * bs], lo, hi);
            break;
        case NNB_PLAN_MAXIMUM:
            for (int64_t k = 0; k < n; k++)
                out[k] = clamped(maximum(a[k * as], b[k * bs]), lo, hi);
            break;
        case NNB_PLAN_MINIMUM:
            for (int64_t k = 0; k < n; k++)
                out[k] = clamped(minimum(a[k * as], b[k * bs]), lo, hi);
            break;
        case NNB_PLAN_CLAMP:
            for (int64_t k = 0; k < n; k++)
                out[k] = clamped(a[k * as], lo, hi);
            break;
        default: /* NNB_PLAN_HARD_SWISH: hard_swish's bound kernel, step by step */
            for (int64_t k = 0; k < n; k++) {
                const float x = a[k * as];
                float g = x + 3.0f;
                g = g < 0.0f ? 0.0f : g;
                g = g > 6.0f ? 6.0f : g;
                out[k] = clamped(x * g / 6.0f, lo, hi);
            }
            break;
        }
    }
    return 0;
}

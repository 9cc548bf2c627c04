/* A plan: a run of float32 elementwise operations executed as one C call
 * (plan.c; built by csrc/build_ffi.py, planned by nnburst/cpu/plan.py). */
#ifndef NNBURST_PLAN_H
#define NNBURST_PLAN_H

#include <stdint.h>

/* cffi cdef begin */
/* What one step computes, elementwise over count floats; every one then
 * clamps its result to [lo, hi] (the fused activation; +-inf for none). */
#define NNB_PLAN_ADD 0
#define NNB_PLAN_SUB 1
#define NNB_PLAN_MUL 2
#define NNB_PLAN_DIV 3
#define NNB_PLAN_MAXIMUM 4
#define NNB_PLAN_MINIMUM 5
#define NNB_PLAN_CLAMP 6      /* out = a (RELU, RELU1, RELU6: the clamp alone) */
#define NNB_PLAN_HARD_SWISH 7 /* out = a * min(max(a + 3, 0), 6) / 6 */

/* A tensor of a step: arena + ref floats for ref >= 0, else the caller's
 * tensor tensors[-1 - ref]. */
typedef struct {
    int32_t kind;
    int32_t a_step; /* 1: a has count floats; 0: a has one, read for each */
    int32_t b_step; /* likewise for b (unused by CLAMP and HARD_SWISH) */
    int32_t reserved;
    int64_t a, b, out;
    int64_t count;
    float lo, hi;
} nnb_plan_step;

/* Runs steps[0..count) in order.  arena holds arena_floats floats (the
 * plan's intermediates), tensors[0..tensor_count) the caller's inputs and
 * outputs.  Every reference is checked against those sizes before any step
 * runs: -EINVAL (and nothing written) for one that falls outside, a kind
 * that does not exist, or an output written over a one-float input.  A
 * step's output may be its input (in place) but must not overlap it
 * otherwise; the planner gives every intermediate floats of its own.
 * Single-threaded: the caller owns every buffer for the call's length and
 * shares none with another thread, so no ordering is needed. */
int nnb_plan_run(const nnb_plan_step *steps, int64_t count, float *arena,
                 int64_t arena_floats, float *const *tensors, const int64_t *tensor_floats,
                 int64_t tensor_count);
/* cffi cdef end */

#endif

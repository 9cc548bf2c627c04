/* The C plan's split convolutions (plan.c after a THREADS step, threadpool.c)
 * under ASan and UBSan: random packed float and 8-bit convolutions and
 * depthwise layers, run once plain and once split over 2-3 threads in runs
 * of rows, on buffers of exactly their sizes (a sub-layer's input or output
 * pointer past its image would be caught), must give the same bytes.
 * Usage: test_plan_threads [RUNS]. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

static int64_t pick(int64_t lo, int64_t hi) { return lo + rand() % (hi - lo + 1); }

struct geometry {
    int64_t batches, in_h, in_w, in_c, fh, fw, sh, sw, dh, dw, pt, pl, out_h, out_w, out_c;
};

/* A random window with at least one output pixel; depthwise: out_c == in_c. */
static struct geometry random_geometry(int depthwise)
{
    struct geometry g;
    for (;;) {
        g.batches = pick(1, 3), g.in_h = pick(1, 12), g.in_w = pick(1, 12);
        g.in_c = pick(1, 33), g.fh = pick(1, 5), g.fw = pick(1, 5);
        g.sh = pick(1, 3), g.sw = pick(1, 3), g.dh = pick(1, 2), g.dw = pick(1, 2);
        g.pt = pick(0, 2), g.pl = pick(0, 2);
        const int64_t pb = pick(0, 2), pr = pick(0, 2);
        g.out_h = (g.in_h + g.pt + pb - (g.fh - 1) * g.dh - 1) / g.sh + 1;
        g.out_w = (g.in_w + g.pl + pr - (g.fw - 1) * g.dw - 1) / g.sw + 1;
        g.out_c = depthwise ? g.in_c : pick(1, 33);
        if (g.in_h + g.pt + pb > (g.fh - 1) * g.dh && g.in_w + g.pl + pr > (g.fw - 1) * g.dw &&
            g.out_h >= 1 && g.out_w >= 1)
            return g;
    }
}

/* Runs steps (one kernel step, with a THREADS step first when threads > 1)
 * over fresh copies of nothing but in, out and scratch. */
static int run(const nnb_plan_step *kernel, int threads, int slices, const void *in,
               int64_t in_bytes, void *out, int64_t out_bytes, int64_t scratch_bytes)
{
    nnb_plan_threads t = {threads, slices, 0};
    nnb_plan_step steps[2] = {{.kind = NNB_PLAN_THREADS, .out = 0, .params = &t}, *kernel};
    const nnb_plan_step *first = threads > 1 ? steps : steps + 1;
    const int64_t count = threads > 1 ? 2 : 1;
    void *arena = malloc((size_t)(scratch_bytes > 0 ? scratch_bytes : 1));
    void *const tensors[2] = {(void *)in, out};
    const int64_t bytes[2] = {in_bytes, out_bytes};
    int rc = nnb_plan_check(first, count, scratch_bytes, bytes, 2);
    if (!rc)
        rc = nnb_plan_run(first, count, arena, scratch_bytes, tensors, bytes, 2, 0);
    free(arena);
    return rc;
}

static int compared; /* layers run both ways: the test must reach them */

static int compare(const nnb_plan_step *kernel, const void *in, int64_t in_bytes,
                   int64_t out_bytes, int64_t scratch_bytes, const char *what)
{
    uint8_t *alone = malloc((size_t)out_bytes), *split = malloc((size_t)out_bytes);
    compared++;
    int failed = run(kernel, 1, 1, in, in_bytes, alone, out_bytes, scratch_bytes) != 0;
    const int shapes[3][2] = {{2, 1}, {3, 1}, {2, 4}};
    for (int k = 0; k < 3 && !failed; k++) {
        memset(split, 0x5a, (size_t)out_bytes);
        failed |= run(kernel, shapes[k][0], shapes[k][1], in, in_bytes, split, out_bytes,
                      scratch_bytes) != 0;
        failed |= memcmp(alone, split, (size_t)out_bytes) != 0;
    }
    if (failed)
        fprintf(stderr, "%s: the split run differs\n", what);
    free(alone);
    free(split);
    return failed;
}

static int float_case(int depthwise)
{
    const struct geometry g = random_geometry(depthwise);
    struct nnb_fconv layer = {g.in_h, g.in_w, g.in_c, g.fh, g.fw, g.sh, g.sw, g.dh, g.dw,
                              g.pt, g.pl, g.out_h, g.out_w, g.out_c, -3.0f, 5.0f};
    const int64_t k = g.fh * g.fw * (depthwise ? 1 : g.in_c);
    const int64_t packed_bytes =
        depthwise ? nnb_fdwconv_packed_bytes(&layer) : nnb_fconv_packed_bytes(&layer);
    const int64_t scratch =
        depthwise ? nnb_fdwconv_scratch_bytes(&layer) : nnb_fconv_scratch_bytes(&layer);
    if (packed_bytes < 0 || scratch < 0)
        return 0; /* a layer the kernel refuses: nothing to split */
    float *w = malloc(sizeof(float) * (size_t)(k * g.out_c)), *b = malloc(sizeof(float) * (size_t)g.out_c);
    for (int64_t i = 0; i < k * g.out_c; i++) w[i] = (float)(rand() % 2001 - 1000) / 300.0f;
    for (int64_t i = 0; i < g.out_c; i++) b[i] = (float)(rand() % 201 - 100) / 50.0f;
    void *packed = malloc((size_t)packed_bytes);
    int failed = (depthwise ? nnb_fdwconv_pack : nnb_fconv_pack)(&layer, w, b, packed, packed_bytes);
    const int64_t in_floats = g.batches * g.in_h * g.in_w * g.in_c;
    const int64_t out_bytes = 4 * g.batches * g.out_h * g.out_w * g.out_c;
    float *in = malloc(sizeof(float) * (size_t)in_floats);
    for (int64_t i = 0; i < in_floats; i++) in[i] = (float)(rand() % 2001 - 1000) / 400.0f;
    nnb_plan_fconv params = {&layer, packed, packed_bytes, g.batches, scratch, NNB_FCONV_BEST, 0};
    nnb_plan_step step = {.kind = depthwise ? NNB_PLAN_FDWCONV : NNB_PLAN_FCONV, .a = -1,
                          .b = 0, .out = -2, .params = &params};
    failed |= compare(&step, in, in_floats * 4, out_bytes, scratch, depthwise ? "fdwconv" : "fconv");
    free(w), free(b), free(packed), free(in);
    return failed;
}

static int quant_case(int depthwise)
{
    const struct geometry g = random_geometry(depthwise);
    struct nnb_qconv layer = {g.in_h, g.in_w, g.in_c, g.fh, g.fw, g.sh, g.sw, g.dh, g.dw,
                              g.pt, g.pl, g.out_h, g.out_w, g.out_c,
                              NNB_QCONV_INT8, (int32_t)pick(-10, 10), NNB_QCONV_INT8,
                              (int32_t)pick(-10, 10), -128, 127};
    const int64_t k = g.fh * g.fw * (depthwise ? 1 : g.in_c);
    const int64_t packed_bytes =
        depthwise ? nnb_qdwconv_packed_bytes(&layer) : nnb_qconv_packed_bytes(&layer);
    const int64_t scratch =
        depthwise ? nnb_qdwconv_scratch_bytes(&layer) : nnb_qconv_scratch_bytes(&layer);
    if (packed_bytes < 0 || scratch < 0)
        return 0;
    int32_t *w = malloc(sizeof(int32_t) * (size_t)(k * g.out_c));
    int32_t *b = malloc(sizeof(int32_t) * (size_t)g.out_c);
    int32_t *m = malloc(sizeof(int32_t) * (size_t)g.out_c), *sh = malloc(sizeof(int32_t) * (size_t)g.out_c);
    for (int64_t i = 0; i < k * g.out_c; i++) w[i] = (int32_t)pick(-127, 127);
    for (int64_t i = 0; i < g.out_c; i++)
        b[i] = (int32_t)pick(-3000, 3000), m[i] = (int32_t)pick(1 << 29, 0x7fffffff),
        sh[i] = (int32_t)pick(-9, -1);
    void *packed = malloc((size_t)packed_bytes);
    int failed = (depthwise ? nnb_qdwconv_pack : nnb_qconv_pack)(&layer, w, b, m, sh, 1, packed,
                                                                 packed_bytes);
    if (failed == -ERANGE) {
        failed = 0;
        goto done;
    }
    const int64_t in_bytes = g.batches * g.in_h * g.in_w * g.in_c;
    const int64_t out_bytes = g.batches * g.out_h * g.out_w * g.out_c;
    int8_t *in = malloc((size_t)in_bytes);
    for (int64_t i = 0; i < in_bytes; i++) in[i] = (int8_t)pick(-128, 127);
    nnb_plan_qconv params = {&layer, packed, packed_bytes, g.batches, scratch, NNB_QCONV_BEST, 0};
    nnb_plan_step step = {.kind = depthwise ? NNB_PLAN_QDEPTHWISE : NNB_PLAN_QCONV, .a = -1,
                          .b = 0, .out = -2, .params = &params};
    failed |= compare(&step, in, in_bytes, out_bytes, scratch, depthwise ? "qdwconv" : "qconv");
    free(in);
done:
    free(w), free(b), free(m), free(sh), free(packed);
    return failed;
}

int main(int argc, char **argv)
{
    const int runs = argc > 1 ? atoi(argv[1]) : 300;
    int failed = nnb_threads_set(3) != 0;
    srand(27);
    for (int i = 0; i < runs && !failed; i++)
        failed |= float_case(0) | float_case(1) | quant_case(0) | quant_case(1);
    /* a THREADS step the check refuses: a count past the pool's limit, no slices */
    nnb_plan_threads bad[2] = {{NNB_THREADS_MAX + 1, 1, 0}, {2, 0, 0}};
    for (int k = 0; k < 2; k++) {
        nnb_plan_step s = {.kind = NNB_PLAN_THREADS, .out = 0, .params = &bad[k]};
        failed |= nnb_plan_check(&s, 1, 0, NULL, 0) != -EINVAL;
    }
    failed |= nnb_threads_set(1) != 0 || nnb_threads_alive() != 0;
    failed |= compared < runs * 3; /* most random layers are ones the kernels take */
    printf("plan threads: %d layers split and compared: %s\n", compared, failed ? "FAILED" : "ok");
    return failed;
}

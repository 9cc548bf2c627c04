/*
 * nnburst C core: every contract, for the cffi module (csrc/build_ffi.py)
 * and any file that needs more than one.  The contracts themselves:
 *
 *   status.h   the negative errno every function returns
 *   fmq.h      the shared-memory queue, its event flag, the deadline clock
 *   kernels.h  the CPU driver's compute loops and heap policy
 */
#ifndef NNBURST_H
#define NNBURST_H

#include "status.h"
#include "fmq.h"
#include "kernels.h"

#endif /* NNBURST_H */

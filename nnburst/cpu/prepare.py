"""The CPU driver's prepare, in one straight line: validate → optimise → compile → bind.

Each stage is a module with one input and one output:

1. :mod:`.validate`: the model as written, every operation registered and
   valid (the same check ``getSupportedOperations`` makes);
2. :mod:`.optimise`: the subgraph rewritten (folds, fused activations,
   NHWC regions);
3. :mod:`.states`: the rewritten subgraph ordered and every operation's
   state prepared, a :class:`.states.CompiledSubgraph` of plain values;
4. :mod:`.bind`: kernels bound, pairs fused and runs planned into C plans,
   handed to the executor (:class:`.executor.PreparedSubgraph`), which only
   runs them.

With a compilation cache (``Compilation.set_caching``) the compiled subgraph
of stages 1-3 is what is written, and a cache hit starts at stage 4: no
validation, no optimiser, no state preparation.  ``NNBURST_VLOG=compilation``
logs each stage's time and the optimiser's rewrites.
"""

from __future__ import annotations

import logging
import time

from ..errors import NNError
from ..hal.model import HalModel, Subgraph
from . import compilation_cache
from .bind import bind_operations, plan_operations
from .executor import PreparedModel, PreparedOperation, PreparedSubgraph
from .optimise import optimise
from .states import CompiledSubgraph, compile_subgraph
from .validate import validate_subgraph

logger = logging.getLogger("nnburst.compilation.prepare")


def prepare_model(
    model: HalModel, cache: tuple[str, bytes] | None = None
) -> tuple[PreparedModel, bool]:
    """``model`` prepared, and whether its compilation came from the cache.

    ``cache``: (cache directory, token) as ``Compilation.set_caching`` gives
    them; a cache entry that is absent, stale, of another format, corrupt or
    that does not bind is prepared afresh and written again."""
    if cache is None:
        return PreparedModel(model), False
    path = compilation_cache.cache_path(cache[0], cache[1])
    key = compilation_cache.structure_key(model)
    cached = compilation_cache.load_compiled(path, key, model.main)
    if cached is not None:
        try:
            return PreparedModel(model, cached), True
        except Exception as exc:  # states or a graph this code's kernels cannot bind
            logger.warning("compilation cache %s does not fit: %s; rewritten", path, exc)
    prepared = PreparedModel(model)
    compilation_cache.save_compiled(path, key, model.main, prepared.main.compiled)
    return prepared, False


def prepare_subgraph(
    model: HalModel,
    subgraph: Subgraph,
    owner: PreparedModel | None = None,
    cached: CompiledSubgraph | None = None,
) -> PreparedSubgraph:
    """One subgraph through the stages; from stage 4 when ``cached``."""
    timed = logger.isEnabledFor(logging.DEBUG)
    start = time.perf_counter() if timed else 0.0
    if cached is None:
        compiled, operations = _compile_and_bind(model, subgraph)
    else:
        compiled, operations = cached, bind_operations(model, cached)
    bound = time.perf_counter() if timed else 0.0
    planned = plan_operations(operations, compiled)
    prepared = PreparedSubgraph(model, compiled, operations, planned, owner)
    if timed:
        end = time.perf_counter()
        logger.debug(
            "prepared %d operations (%d after rewrites, %d steps)%s: %.1f ms, planning %.1f ms",
            len(subgraph.operations),
            len(compiled.order),
            len(planned),
            " from the compilation cache" if cached is not None else "",
            (end - start) * 1e3,
            (end - bound) * 1e3,
        )
    return prepared


def _compile_and_bind(
    model: HalModel, subgraph: Subgraph
) -> tuple[CompiledSubgraph, list[PreparedOperation]]:
    """Stages 1-3 and the kernels of stage 4; a rewritten graph that does not
    prepare or bind is logged and the graph prepared as written."""
    validate_subgraph(model, subgraph)  # as written: a rewrite never hides an invalid operation
    optimised = optimise(subgraph)
    try:
        compiled = compile_subgraph(model, optimised)
        return compiled, bind_operations(model, compiled)
    except NNError as exc:
        if optimised is subgraph:
            raise
        logger.warning("graph optimiser: %s; the subgraph runs as written", exc)
    compiled = compile_subgraph(model, subgraph)
    return compiled, bind_operations(model, compiled)

"""``nnburst stress``: many concurrent bursts on random models, with faults on request.

:mod:`.run` is the command (options, child processes, the summary); :mod:`.worker`
the threads; :mod:`.models` the random models; :mod:`.faults` the injected
faults; :mod:`.monitor` the counters, bounds, watchdog and leak check.
"""

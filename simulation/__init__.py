"""Proxima's simulation: raters that answer from a known truth, for tests, benchmarks, ``proxima plan`` and
``proxima simulate``.

``oracles`` the simulated raters (the one human noise model: logistic in the distance gap plus a lapse
rate, ``HUMAN_SCALE`` / ``HUMAN_LAPSE``), data generators and the planner-driving loop; ``noise`` fitting
that model to people's answers and to a pilot study; ``ratings`` similarity ratings as noisy as people's
(raters' offsets and slopes, near-ties) and their fit to a pilot; ``datasets`` the real data sets;
``crowd`` a crowd of raters answering a running server over HTTP. This package may import the engine,
never ``workers`` or ``webapp`` (nor Flask, Redis or RQ); the engine never imports it (a question kind
names its simulated rater by a dotted path, loaded when a simulation asks for it).
"""

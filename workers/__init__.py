"""Everything between Redis and the engine, in three packages:

- ``workers.store``: the Redis-facing storage that web processes and jobs share: keys, study
  configs, studies and items, the answer log, question pools, raters, engine state, uploads,
  backups and the job queue. Light: no numpy, so a web process can import it at start-up.
- ``workers.jobs``: what RQ workers run: the update pass that applies new answers to the learners,
  rebuilds, and the learners (engine planners with their stored state).
- ``workers.results``: what the learners produced, read back: exports, trained models, graph layout.
  numpy-heavy; web processes import these lazily, when a researcher asks.

Nothing here imports Flask or ``webapp`` (tests/test_import_rules.py).
"""

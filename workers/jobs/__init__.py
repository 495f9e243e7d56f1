"""RQ jobs, one module per noun: the update job (``update``) and its pass (``update_pass``), the study
lock (``lock``), the learners kept in memory (``learner_cache``), state commits and checkpoints
(``checkpoints``), the dashboard summary (``summary``) and truth curve (``truth_curve``), rebuilds
(``rebuild``) and the learners they drive (``learners``); docs/architecture.md lists them all.

``update_study`` is re-exported so that update jobs queued by a version before this package
existed (job function ``workers.jobs.update_study``) still run after an upgrade."""
from workers.jobs.update import update_study  # noqa: F401

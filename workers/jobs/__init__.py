"""RQ jobs: the update pass (``update``), rebuilds (``rebuild``) and the learners they drive
(``learners``).

``update_study`` is re-exported so that update jobs queued by a version before this package
existed (job function ``workers.jobs.update_study``) still run after an upgrade."""
from workers.jobs.update import update_study  # noqa: F401

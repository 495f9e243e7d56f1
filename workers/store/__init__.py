"""Redis-facing storage shared by web processes and RQ jobs (no numpy at import time).

Every Redis key and hash field is built in ``keys``."""

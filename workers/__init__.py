"""RQ jobs and the storage layer between Redis and the engine.

Web processes import only the light modules here (keys, storage, queue); the jobs
module imports the numpy-heavy engine and runs inside RQ workers.
"""

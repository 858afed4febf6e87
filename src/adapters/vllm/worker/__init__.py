"""The worker process's side: the workers, the model runners and their mixins, the KV
cache's bytes, the profiler and the device communicator."""

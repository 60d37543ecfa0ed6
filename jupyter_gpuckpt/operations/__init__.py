"""The operations on a kernel (checkpoint, suspend, resume, rebuild) and failover, each run
one way (:mod:`.runner`)."""

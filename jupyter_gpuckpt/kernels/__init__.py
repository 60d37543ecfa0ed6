"""The kernel registry, at the bottom of the server side: each kernel's record and lifecycle
state, the ledger that keeps them across restarts, its activity, its cells, its processes, and
the calls into its engine."""

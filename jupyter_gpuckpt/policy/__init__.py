"""The reclaim policy: the pure decisions, the pass that reads the server and acts on them,
what a kernelspec may change of it, and the failures of its sources."""

"""The kernel's state beside its variables, and what a checkpoint records about it: the
session of the hooks, the cells run, RNG states, the environment, the GPUs, and which
names are the user's."""

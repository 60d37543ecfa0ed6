"""Load pytest-jupyter's server fixtures (jp_fetch, jp_ws_fetch, jp_serverapp ...) and the
Slurm test cluster's (tests/slurm_cluster.py) for all tests."""

pytest_plugins = ["pytest_jupyter.jupyter_server", "slurm_cluster"]

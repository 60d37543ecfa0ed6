"""Load pytest-jupyter's server fixtures (jp_fetch, jp_ws_fetch, jp_serverapp ...) for all tests."""

pytest_plugins = ["pytest_jupyter.jupyter_server"]

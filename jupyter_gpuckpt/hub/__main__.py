"""``python -m jupyter_gpuckpt.hub``: the command the hub runs for the managed service."""

from .app import main

main()

"""The IPython side of the hooks: the ``%gpuckpt`` magic and the server's calls, and the banner."""

"""``jupyter gpuckpt``: the command, its REST client, ``doctor`` and the kernelspec it installs."""

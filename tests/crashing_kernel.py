"""A kernel that crashes at its next start when told to, as ipykernel sometimes does on a
loaded machine (used as a kernelspec's program by test_server_restart.py).

``python crashing_kernel.py MARKER ARGS...``: if the file ``MARKER`` exists, remove it and
exit with status 3 at once; otherwise run ``ipykernel_launcher ARGS...``.
"""

import os
import runpy
import sys

marker = sys.argv.pop(1)
if os.path.exists(marker):
    os.remove(marker)
    sys.exit(3)
sys.argv[0] = "ipykernel_launcher"
runpy.run_module("ipykernel_launcher", run_name="__main__")

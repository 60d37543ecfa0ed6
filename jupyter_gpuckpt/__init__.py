"""Server side of jupyter-gpuckpt (extension, provisioner, REST, CLI): see DESIGN.md.

The checkpoint engine itself runs inside kernels, in the ``kernel_hooks`` package.
"""

__version__ = "0.1.0"

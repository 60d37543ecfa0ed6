"""A restored image still hears its colorizer and norm: changing the colormap or the norm's
limits marks it stale, as before the checkpoint (Kishu's ``image.set_cmap('plasma')`` case)."""

from __future__ import annotations

import ast

from kernel_processes import KernelFactory

SETUP = """
import matplotlib.pyplot as plt
import numpy as np
fig, ax = plt.subplots()
image = ax.imshow(np.arange(100.0).reshape(10, 10), cmap='viridis')
wired = (image._id_colorizer, image._colorizer._id_norm)
def own_callback(*args): pass
user = image.norm.callbacks.connect('changed', own_callback)
"""
HEARS = """
image.stale = False; image.set_cmap('plasma'); heard_cmap = image.stale
image.stale = False; image.norm.vmin = 5.0; heard_norm = image.stale
print(repr((heard_cmap, heard_norm, wired == (image._id_colorizer, image._colorizer._id_norm),
            sorted(image._colorizer.callbacks.callbacks['changed']), sorted(image.norm.callbacks.callbacks['changed']))))
"""


def test_a_restored_image_hears_its_colorizer_and_norm(kernels: KernelFactory) -> None:
    saving = kernels.start()
    saving.ok(SETUP)
    checkpoint = saving.save()
    restoring = kernels.start()
    restoring.ok(f"%gpuckpt restore {checkpoint}")
    after = ast.literal_eval(restoring.ok(HEARS))
    before = ast.literal_eval(saving.ok(HEARS))
    assert before[:3] == (True, True, True)
    assert after[:4] == before[:4]
    # the notebook's own callback is dropped, as matplotlib's pickling drops it
    assert after[4] == [cid for cid in before[4] if cid != saving.value("user")]

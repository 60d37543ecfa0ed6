"""jax arrays on one device: data out of band through numpy, put back on the same device.

Sharded arrays (several devices) keep jax's own pickling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .arrays import OutOfBand, Reduction


def _rebuild_jax(host: np.ndarray, platform: str, device_id: int) -> Any:
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = []
    matches = [d for d in devices if d.id == device_id]
    if not matches:
        raise RuntimeError(f"this kernel has no jax device {platform}:{device_id}")
    return jax.device_put(host, matches[0])


def reducers(out: OutOfBand) -> dict[type, Callable[[Any], Reduction]]:
    def reduce_jax(arr: jax.Array) -> Reduction:
        devices = arr.devices()
        if len(devices) != 1:
            return NotImplemented
        (device,) = devices
        host = np.asarray(arr)
        if device.platform in ("gpu", "cuda"):
            out.note_device(("jax", id(arr)), f"cuda:{device.id}", host.nbytes)
        return _rebuild_jax, (host, device.platform, device.id)

    return {type(jax.numpy.zeros(0)): reduce_jax}

"""jax arrays (CPU here; the cupy test needs a GPU and lives in test_gpu.py)."""

from __future__ import annotations


def test_jax_arrays_round_trip(kernels):
    saver = kernels.start()
    saver.ok("import jax, jax.numpy as jnp\n"
             "ja = jnp.arange(200_000, dtype=jnp.float32) * 2\n"
             "jsmall = jnp.array([1, 2, 3])\n"
             "pair = {'a': ja, 'again': ja}")
    checkpoint = saver.save()
    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.value("(isinstance(ja, jax.Array), str(ja.dtype), float(ja[12345]), jsmall.tolist())") == (
        True, "float32", 24690.0, [1, 2, 3])
    assert fresh.value("(str(next(iter(ja.devices()))), pair['a'] is pair['again'] is ja)") == ("cpu:0", True)

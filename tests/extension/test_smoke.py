def test_save_restore_smoke(kernels):
    a = kernels.start()
    a.ok("x = [1, 2, 3]\ny = {'k': x}")
    checkpoint = a.save()
    b = kernels.start()
    b.ok(f"%gpuckpt restore {checkpoint}")
    assert b.value("(y['k'] is x, x)") == (True, [1, 2, 3])

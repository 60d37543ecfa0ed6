"""astropy.wcs's Celprm and Prjprm, which astropy does not pickle, come back member for member
(Kishu's coverage case ``celprm = Celprm(); celprm.ref = [180.0, 90.0]``, and more)."""

from __future__ import annotations

from kernel_processes import KernelFactory

SETUP = """
from astropy.wcs import Celprm, Prjprm
fresh = Celprm()
given = Celprm(); given.ref = [180.0, 90.0]
ready = Celprm(); ready.ref = [10.0, 60.0]; ready.prj.code = 'ZPN'; ready.prj.pv = [0.0, 1.0, 0.5]
ready.offset = True; ready.phi0 = 5.0; ready.theta0 = 80.0; ready.set()
alone = Prjprm(); alone.code = 'SIN'; alone.pv = [None, 0.1, 0.2]; alone.set()
"""
MEMBERS = """
import numpy as np
def members(s):
    names = [n for n in dir(type(s)) if not n.startswith('__') and not callable(getattr(s, n))]
    return {n: (members(v) if type(v).__name__ == 'Prjprm' else
                np.asarray(v).tolist() if isinstance(v, np.ndarray) else v) for n, v in ((n, getattr(s, n)) for n in names)}
print(repr({name: members(globals()[name]) for name in ('fresh', 'given', 'ready', 'alone')}))
"""


def test_celprm_and_prjprm_come_back_member_for_member(kernels: KernelFactory) -> None:
    saving = kernels.start()
    saving.ok(SETUP)
    before = saving.ok(MEMBERS)
    checkpoint = saving.save()
    restoring = kernels.start()
    report = restoring.ok(f"%gpuckpt restore {checkpoint}")
    assert "Not restored" not in report, report
    assert restoring.ok(MEMBERS) == before
    # they work: WCSLIB sets the rebuilt structs up again, and the projection still projects
    assert restoring.value("ready._flag != 0 and alone._flag != 0 and given._flag == 0") is True
    assert restoring.ok("print(alone.prjs2x([30.0], [60.0]))") == saving.ok("print(alone.prjs2x([30.0], [60.0]))")

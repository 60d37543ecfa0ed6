"""A suspend ends the kernel's whole process tree: children, a session of their own, daemons."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from server_fixtures import api, run, start_kernel

CHILDREN = """
import multiprocessing, os, subprocess, sys, time
plain = subprocess.Popen(['sleep', '1000'])
own_session = subprocess.Popen(['sleep', '1001'], start_new_session=True)
stubborn = subprocess.Popen([sys.executable, '-c',
    'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print("ready", flush=True); time.sleep(1000)'],
    stdout=subprocess.PIPE)
stubborn.stdout.readline()
daemon_pid = os.path.join(os.getcwd(), 'daemon.pid')
subprocess.run([sys.executable, '-c',
    'import os, sys, time\\n'
    'if os.fork(): sys.exit(0)\\n'
    'os.setsid()\\n'
    'if os.fork(): sys.exit(0)\\n'
    'open(sys.argv[1], "w").write(str(os.getpid()))\\n'
    'time.sleep(1000)', daemon_pid], check=True)
while not os.path.exists(daemon_pid) or not open(daemon_pid).read():
    time.sleep(0.05)
pool = multiprocessing.get_context('fork').Pool(2)
pool.map(abs, range(4))
pids = [plain.pid, own_session.pid, stubborn.pid, int(open(daemon_pid).read())] + [p.pid for p in pool._pool]
print(' '.join(map(str, pids)))
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_suspend_ends_children_sessions_and_daemons_of_the_kernel(jp_fetch, jp_serverapp, jp_root_dir):
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, f"import os; os.chdir({str(jp_root_dir)!r})")
    pids = [int(p) for p in (await run(jp_serverapp, kernel_id, CHILDREN)).split()]
    kernel_pid = jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
    assert len(pids) == 6 and all(_alive(p) for p in pids), pids
    # the daemon left the kernel's process group and tree: only the tag finds it
    assert os.getpgid(pids[3]) != os.getpgid(kernel_pid)

    model = await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")

    assert model["state"] == "suspended" and model["notice"] is None
    survivors = [p for p in [kernel_pid, *pids] if _alive(p)]
    assert survivors == [], f"processes of the suspended kernel still run: {survivors}"


async def test_the_suspend_event_lists_no_survivors(jp_fetch, jp_serverapp, jp_ws_fetch):
    ws = await jp_ws_fetch("api", "events", "subscribe")
    kernel_id = await start_kernel(jp_fetch)
    await run(jp_serverapp, kernel_id, "import subprocess; child = subprocess.Popen(['sleep', '1000'])")
    await api(jp_fetch, "kernels", kernel_id, "suspend", method="POST", wait="1")
    while True:
        event = json.loads(await asyncio.wait_for(ws.read_message(), 30))
        if event.get("phase") == "done" and "suspend" in event["schema_id"]:
            break
    ws.close()
    assert event["survivors"] == [] and event["kernel_id"] == kernel_id

"""jupyter_kernel_test's ``KernelTests`` (the protocol conformance suite ipykernel and other
kernels run) against a kernel of the checkpointable kernelspec that a real server started: as
started, and after a suspend and a resume, when it is a new process on new ports under the same
id, which a client reaches through the connection file the server rewrote."""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from pathlib import Path

import jupyter_kernel_test
from jupyter_client.blocking import BlockingKernelClient
from live_server import KERNEL_NAME, running_server


class _ServedKernelTests(jupyter_kernel_test.KernelTests):
    """The suite, with the samples ipykernel answers, on a kernel a live server runs."""

    __test__ = False
    resumed = False
    """Suspend and resume the kernel (with a variable in it) before the suite runs."""

    kernel_name = KERNEL_NAME
    language_name = "python"
    file_extension = ".py"
    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('test', file=sys.stderr)"
    completion_samples = [{"text": "zi", "matches": {"zip"}}]
    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2"]
    invalid_code_samples = ["import = 7q"]
    code_page_something = "zip?"
    code_generate_error = "raise ValueError('the error')"
    code_execute_result = [{"code": "1+2+3", "result": "6"}, {"code": "resumed_value", "result": "42"}]
    code_display_data = [{"code": "from IPython.display import HTML, display; display(HTML('<b>test</b>'))",
                          "mime": "text/html"}]
    code_history_pattern = "1?2*"
    # not "range": IPython writes a session's history to its database in batches, and a range of the
    # current session came back empty from ipykernel here, as started as much as after a resume
    supported_history_operations = ("tail", "search")
    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output; clear_output()"

    _stack: ExitStack

    @classmethod
    def setUpClass(cls) -> None:
        cls._stack = ExitStack()
        base = Path(cls._stack.enter_context(tempfile.TemporaryDirectory(prefix="conformance-")))
        server = cls._stack.enter_context(running_server(base))
        installed = server.cli("install-kernelspec", "--user", "--gpus", "0")
        assert installed.returncode == 0, installed.stderr
        kernel_id = server.start_kernel()
        server.run(kernel_id, "resumed_value = 42")
        if cls.resumed:
            suspended = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/suspend?wait=1")
            assert suspended["state"] == "suspended", suspended
            resumed = server.api("POST", f"api/gpuckpt/kernels/{kernel_id}/resume?wait=1")
            assert resumed["state"] == "running", resumed
        cls.kc = BlockingKernelClient(connection_file=str(server.runtime_dir / f"kernel-{kernel_id}.json"))
        cls.kc.load_connection_file()
        cls.kc.start_channels()
        cls.kc.wait_for_ready(timeout=60)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.kc.stop_channels()
        cls._stack.close()  # the server stops and shuts its kernel down


class TestAsStarted(_ServedKernelTests):
    __test__ = True


class TestAfterSuspendAndResume(_ServedKernelTests):
    __test__ = True
    resumed = True

"""Two signals back to back (issue 34 item 8): what a nested `timeout`, a process-group kill or an
impatient Ctrl-C sends. The second one lands while the run unwinds from the first (killing the
payload, writing the interrupted reports) and must not turn "no verdict, exit 143/130" into a
traceback and exit 1."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
JOB = "correctness-interpreter-triton-3.8-1of2"

# A job that waits to be interrupted, and a slow step once it is (argv[2]: where, argv[3]: how
# long), so that the second signal reliably lands in that step: while the interrupted reports
# are written (a slow disk), while the CLI prints its verdict (a full stderr pipe), or after it
# returned, while the interpreter shuts down.
SCRIPT = textwrap.dedent("""
    import sys, time
    from mha_ci import cli
    from mha_ci.jobs import runner

    out, where, seconds, root, job = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
    write_reports, interruption = runner.write_reports, cli.interruption

    def slow_reports(report):
        if report.interrupted and where == "reports":
            time.sleep(seconds)
        write_reports(report)

    def slow_verdict(exc):
        if where == "verdict":
            time.sleep(seconds)
        return interruption(exc)

    def waiting_job(job, ctx):
        print("started", flush=True)
        time.sleep(120)

    runner.write_reports, cli.interruption = slow_reports, slow_verdict
    runner.register("correctness", waiting_job)
    sys.argv = ["mha-ci", "--root", root, "run", "--job", job, "--executor", "host", "--out", out]
    code = cli.main()        # as the mha-ci command does
    if where == "exit":
        time.sleep(seconds)
    sys.exit(code)
""")


def interrupt_twice(tmp_path: Path, signum: int, gap_s: float, where: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path / "out"), where, "0.5", str(REPO), JOB],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        proc.send_signal(signum)
        time.sleep(gap_s)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize("signum, code, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")],
                         ids=["sigterm", "sigint"])
@pytest.mark.parametrize("gap_s, where", [(0.0, "none"), (0.2, "reports"), (0.2, "verdict"), (0.2, "exit")],
                         ids=["back-to-back", "while-reporting", "while-printing", "while-exiting"])
def test_a_second_signal_keeps_the_no_verdict_contract(tmp_path, signum, code, name, gap_s, where):
    returncode, err = interrupt_twice(tmp_path, signum, gap_s, where)
    assert "Traceback" not in err, err
    assert returncode == code, err
    assert f"interrupted ({name}): no verdict" in err

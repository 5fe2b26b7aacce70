"""A full disk under the writes of a report (issue 34 item 7): the run ends with exit 3 and leaves
no report that could be read as this run's, whole or cut short, nor the earlier run's beside it."""
import errno
import json
import os
import pathlib
from pathlib import Path

from mha_ci.cli import main
from mha_ci.errors import ExitCode
from mha_ci.payloads import correctness

from perf_builders import doc, entry

REPO = Path(__file__).resolve().parents[3]
A = "dense_b8_hq48_hk8_sq2048_sk2048_dqk64_dv64_c1"


def full_disk(monkeypatch, names: set[str]) -> None:
    """Writes into a file whose name holds one of `names` fail with ENOSPC once the file exists
    (empty), as on a full disk: through Path.write_text/write_bytes and through os.fdopen."""
    def hit(path) -> bool:
        return any(name in Path(path).name for name in names)

    def no_space(path):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    real_text, real_bytes, real_fdopen = pathlib.Path.write_text, pathlib.Path.write_bytes, os.fdopen

    def write_text(self, data, *args, **kwargs):
        if hit(self):
            real_text(self, "")
            raise no_space(self)
        return real_text(self, data, *args, **kwargs)

    def write_bytes(self, data):
        if hit(self):
            real_bytes(self, b"")
            raise no_space(self)
        return real_bytes(self, data)

    class Full:
        def __init__(self, stream, path):
            self.stream, self.path = stream, path

        def write(self, data):
            raise no_space(self.path)

        def __getattr__(self, name):
            return getattr(self.stream, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.stream.close()

    def fdopen(fd, *args, **kwargs):
        path = os.readlink(f"/proc/self/fd/{fd}")
        stream = real_fdopen(fd, *args, **kwargs)
        return Full(stream, path) if hit(path) else stream

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)
    monkeypatch.setattr(os, "fdopen", fdopen)


def test_perf_compare_on_a_full_disk_leaves_no_report_beside_the_last_runs(tmp_path, capsys, monkeypatch):
    base, regressed = tmp_path / "base.json", tmp_path / "cand.json"
    base.write_text(json.dumps(doc([entry(A, 100.0)])))
    regressed.write_text(json.dumps(doc([entry(A, 200.0)])))
    out = tmp_path / "out"
    assert main(["--root", str(REPO), "perf", "compare", str(base), str(base), "--out", str(out)]) == ExitCode.OK
    assert "0 regressions" in (out / "compare.md").read_text()
    capsys.readouterr()
    full_disk(monkeypatch, {"compare.md"})
    code = main(["--root", str(REPO), "perf", "compare", str(base), str(regressed), "--out", str(out)])
    assert code == ExitCode.ENVIRONMENT_ERROR
    assert "no verdict" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == []


def test_the_correctness_payload_on_a_full_disk_is_an_environment_error_without_a_report(tmp_path, capsys,
                                                                                         monkeypatch):
    monkeypatch.setenv("MHA_CI_OUT", str(tmp_path))
    monkeypatch.setattr(correctness.pincheck, "enforce_report",
                        lambda: {"versions": {}, "pins_checked": True, "pin_mismatches": []})
    (tmp_path / "tests.txt").write_text("")
    (tmp_path / "report.json").write_text(json.dumps({"counts": {"passed": 10}}))    # an earlier run's
    full_disk(monkeypatch, {"report.json"})
    code = correctness.main(["run", "--tests", "tests.txt", "--junit", "junit.xml", "--report", "report.json"])
    assert code == ExitCode.ENVIRONMENT_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in err and "report.json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tests.txt"]

"""Every program under clients/ runs against a real server and prints what it promises."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_python_static_tables(start_server):
    s = start_server()     # its own server: the example drops and creates "nodes"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "clients", "python",
                                                     "static_tables.py"), s.dsn],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["hall: 1", "lab: 2"]

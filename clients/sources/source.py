"""A minimal cqgate source in plain Python: connect to the ingest port, name the wrapper and
the stream on the first line, then send lines (here, a reading a second from this machine's
load average, stamped on arrival because the line has no event time).

    python clients/sources/source.py meter --count 5
"""
import argparse
import os
import socket
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stream")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=55533)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--every", type=float, default=1.0, help="seconds between lines")
    args = ap.parse_args()
    with socket.create_connection((args.host, args.port)) as sock:
        sock.sendall(f"csvwrapper,{args.stream}\n".encode())
        for i in range(args.count):
            sock.sendall(f"{i},{os.getloadavg()[0]}\n".encode())
            time.sleep(args.every)
        sock.shutdown(socket.SHUT_WR)
        answer = sock.recv(4096)            # empty, or one ERROR: line
        if answer:
            raise SystemExit(answer.decode().strip())


if __name__ == "__main__":
    main()

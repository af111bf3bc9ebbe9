#!/usr/bin/env python3
"""Connections a second that a running `giant serve` answers when each
carries one request (GET /healthz, Connection: close): the cost of the
accept path (the gate's look at the first head, the hand-over to the
HTTP library).  Give two ports to measure two servers in turn, round by
round, so that both see the same machine:

    python3 bench/http_conn.py PORT [PORT2] [--n 2000] [--rounds 3]
"""
import argparse
import socket
import time

REQ = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def rate(port, n):
    t = time.perf_counter()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(REQ)
        out = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            out += d
        s.close()
        if not out.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"port {port}: {out[:200]!r}")
    return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ports", type=int, nargs="+")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for r in range(a.rounds):
        rates = [rate(p, a.n) for p in a.ports]
        line = "  ".join(f"port {p}: {x:.0f} conn/s" for p, x in zip(a.ports, rates))
        if len(rates) == 2:
            line += f"  ratio {rates[1] / rates[0]:.3f}"
        print(f"round {r + 1}: {line}")


if __name__ == "__main__":
    main()

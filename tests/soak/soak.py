#!/usr/bin/env python3
"""A soak of the real `flashlane serve` on 127.0.0.1: many clients for a bounded time, mixing
good requests (greedy and seeded, streaming or not, read slowly or dropped mid-stream) with bad
ones (malformed JSON, prompts larger than any session, huge max_tokens, slowloris connections),
against sessions small enough that replies move and pause. It stops by itself and checks:

- the server is alive and every session is free at the end (nothing leaked);
- every good reply equals the reply the same request got alone before the load;
- every bad request got the status it should (400, or a closed connection for slowloris);
- resident memory at the end within a stated bound of the start.

    python3 tests/soak/soak.py --bin target/release/flashlane --clients 200 --seconds 600 \\
        --json soak.json

Loopback only; bounded in clients, time and requests. Exit status 0 when every check holds.
Needs only the standard library (the openai client is exercised by tests/e2e).
"""

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter

# Sessions that a counting reply outgrows (moves) and too few for every client (pauses, queue).
SERVE_ARGS = ["--context", "2048", "--slot-contexts", "256x6", "--slot-grow", "64", "--parallel", "8"]
# Resident memory at the end may exceed the start by this factor plus this many bytes: the
# allocator keeps some of what the peak used, but the load must not leave its garbage behind.
RSS_FACTOR, RSS_SLACK = 1.5, 64 << 20
# Longest a single request may take before the soak calls it stuck.
REQUEST_TIMEOUT_S = 300
# How long the server may take to close a connection that never finishes its headers.
SLOWLORIS_LIMIT_S = 30

# (prompt, max_tokens): short replies, and long ones that outgrow a 256-token session (moves, and
# pauses when the large session is taken).
PROMPTS = [(f"Count from 1 to {n}.", 160) for n in (5, 12, 20, 33, 47)] + [("Count from 1 to 1000.", 500)]
SEEDED = [(f"Count from 1 to {n}.", seed) for n, seed in ((9, 1), (15, 2), (30, 3))]


class Server:
    def __init__(self, binary, extra):
        cmd = [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--load-limit-gb", "4",
               "--served-model-name", "m", *SERVE_ARGS, *extra]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.log, self.port = [], None
        for line in self.proc.stderr:
            self.log.append(line)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("flashlane did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr], daemon=True).start()

    def rss(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def request(port, method, path, body=None, raw=None, timeout=REQUEST_TIMEOUT_S):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, data, {"Content-Type": "application/json"} if data is not None else {})
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


def chat_body(prompt, max_tokens=160, temperature=0.0, seed=None, stream=False):
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": temperature, "stream": stream}
    if seed is not None:
        body["seed"] = seed
    return body


def chat_text(port, body):
    status, data = request(port, "POST", "/v1/chat/completions", body)
    if status != 200:
        return status, None
    return status, json.loads(data)["choices"][0]["message"]["content"]


def stream_text(port, body, read_pause=0.0, stop_after=None):
    """Streams a chat reply; returns (status, text or None). `stop_after` chunks: disconnect."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        resp.read()
        conn.close()
        return resp.status, None
    text, chunks = [], 0
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        payload = line[6:]
        if payload == b"[DONE]":
            break
        event = json.loads(payload)
        for choice in event.get("choices", []):
            text.append(choice.get("delta", {}).get("content") or "")
        chunks += 1
        if stop_after is not None and chunks >= stop_after:
            conn.sock.close()  # vanish mid-stream
            return 200, None
        if read_pause:
            time.sleep(read_pause)
    conn.close()
    return 200, "".join(text)


def other_api_text(port, api, prompt, max_tokens):
    """A greedy reply through Anthropic's Messages API or OpenAI's Responses API, streamed: the
    same chat as the chat API's, so the same text. Returns (status, text or None)."""
    if api == "messages":
        body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "temperature": 0, "stream": True}
        path, delta_type, field = "/v1/messages", "content_block_delta", "text"
    else:
        body = {"model": "m", "input": prompt, "max_output_tokens": max_tokens, "temperature": 0, "stream": True}
        path, delta_type, field = "/v1/responses", "response.output_text.delta", "delta"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        resp.read()
        conn.close()
        return resp.status, None
    text, ended = [], False
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        event = json.loads(line[6:])
        if event.get("type") == delta_type:
            piece = event.get("delta", {}).get(field) if api == "messages" else event.get(field)
            text.append(piece or "")
        if event.get("type") in ("message_stop", "response.completed", "response.incomplete"):
            ended = True
        if event.get("type") in ("error", "response.failed"):
            break
    conn.close()
    return (200, "".join(text)) if ended else (200, None)


def slowloris(port):
    """Sends a header line every second and never finishes; returns seconds until closed."""
    start = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        while time.time() - start < SLOWLORIS_LIMIT_S:
            time.sleep(1)
            try:
                s.sendall(b"X-Slow: 1\r\n")
                s.settimeout(0.01)
                if s.recv(1024) == b"":
                    return time.time() - start
            except socket.timeout:
                pass
            except OSError:
                return time.time() - start
            finally:
                s.settimeout(5)
        return None
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("FLASHLANE_BIN", "target/release/flashlane"))
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("serve_args", nargs="*", help="more flags for flashlane serve (after --)")
    args = ap.parse_args()
    print(f"soak: {args.clients} clients for {args.seconds:.0f} s, seed {args.seed}", flush=True)

    server = Server(args.bin, args.serve_args)
    port = server.port
    # The replies each good request must get: the same request alone, before any load.
    solo = {}
    for p, m in PROMPTS:
        solo[("greedy", p)] = chat_text(port, chat_body(p, max_tokens=m))[1]
    for p, seed in SEEDED:
        solo[("seeded", p, seed)] = chat_text(port, chat_body(p, temperature=0.8, seed=seed))[1]
    assert all(v is not None for v in solo.values()), "a solo request failed"
    rss_start = server.rss()
    rss_peak = [rss_start]
    done = threading.Event()

    def sample_rss():
        while not done.is_set():
            rss_peak[0] = max(rss_peak[0], server.rss())
            time.sleep(0.5)

    threading.Thread(target=sample_rss, daemon=True).start()

    kinds = Counter()
    statuses = Counter()
    problems = []
    lock = threading.Lock()
    deadline = time.time() + args.seconds
    # (kind, weight)
    mix = [("greedy", 25), ("stream", 20), ("seeded", 10), ("slow_reader", 5), ("disconnect", 10),
           ("malformed", 10), ("oversized", 6), ("huge_max_tokens", 6), ("unknown_model", 4),
           ("slowloris", 4), ("messages", 8), ("responses", 8)]
    names = [k for k, _ in mix]
    weights = [w for _, w in mix]

    def note(kind, status, problem=None):
        with lock:
            kinds[kind] += 1
            statuses[f"{kind} {status}"] += 1
            if problem:
                problems.append(f"{kind}: {problem}")

    def client(i):
        rng = random.Random(args.seed * 1000 + i)
        while time.time() < deadline:
            kind = rng.choices(names, weights)[0]
            try:
                if kind in ("greedy", "stream", "slow_reader"):
                    p, m = rng.choice(PROMPTS)
                    if kind == "greedy":
                        status, text = chat_text(port, chat_body(p, max_tokens=m))
                    else:
                        status, text = stream_text(port, chat_body(p, max_tokens=m, stream=True),
                                                   read_pause=0.05 if kind == "slow_reader" else 0.0)
                    want = solo[("greedy", p)]
                    note(kind, status, None if status == 200 and text == want
                         else f"{p!r}: status {status}, {text!r} != {want!r}")
                elif kind in ("messages", "responses"):
                    p, m = rng.choice(PROMPTS)
                    status, text = other_api_text(port, kind, p, m)
                    want = solo[("greedy", p)]
                    note(kind, status, None if status == 200 and text == want
                         else f"{p!r}: status {status}, {text!r} != {want!r}")
                elif kind == "seeded":
                    p, seed = rng.choice(SEEDED)
                    status, text = chat_text(port, chat_body(p, temperature=0.8, seed=seed))
                    want = solo[("seeded", p, seed)]
                    note(kind, status, None if status == 200 and text == want
                         else f"{p!r} seed {seed}: status {status}, {text!r} != {want!r}")
                elif kind == "disconnect":
                    status, _ = stream_text(port, chat_body(rng.choice(PROMPTS)[0], stream=True),
                                            stop_after=rng.randint(1, 4))
                    note(kind, status, None if status == 200 else f"status {status}")
                elif kind == "malformed":
                    raw = rng.choice([b"{not json", b"[]", b'{"messages": 3}', b'{"model":"m"}',
                                      bytes(rng.getrandbits(8) for _ in range(64))])
                    path = rng.choice(["/v1/chat/completions", "/v1/messages", "/v1/responses"])
                    status, _ = request(port, "POST", path, raw=raw)
                    note(kind, status, None if status in (400, 422) else f"status {status} for {path} {raw!r}")
                elif kind == "oversized":
                    status, _ = request(port, "POST", "/v1/chat/completions",
                                        chat_body("word " * rng.randint(3000, 6000), max_tokens=8))
                    note(kind, status, None if status == 400 else f"status {status}")
                elif kind == "huge_max_tokens":
                    status, _ = request(port, "POST", "/v1/chat/completions",
                                        chat_body("hi", max_tokens=rng.choice([10 ** 6, 10 ** 9, 2 ** 40])))
                    note(kind, status, None if status == 400 else f"status {status}")
                elif kind == "unknown_model":
                    body = chat_body("hi", max_tokens=4)
                    body["model"] = "not-served"
                    status, _ = request(port, "POST", "/v1/chat/completions", body)
                    note(kind, status, None if status == 404 else f"status {status}")
                elif kind == "slowloris":
                    closed = slowloris(port)
                    note(kind, "closed" if closed is not None else "open",
                         None if closed is not None else f"still open after {SLOWLORIS_LIMIT_S} s")
            except Exception as e:  # noqa: BLE001 - a failure of the server, counted
                note(kind, "exception", repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(2)  # let dropped streams' sessions be swept
    health = request(port, "GET", "/health", timeout=10)[0]
    slots = json.loads(request(port, "GET", "/slots", timeout=10)[1])
    busy = [s for s in slots["sessions"] if s["state"] != "free"]
    metrics = {}
    for line in request(port, "GET", "/metrics", timeout=10)[1].decode().splitlines():
        name = line.split(" ")[0]
        if name in ("flashlane_moves_total", "flashlane_pauses_total", "flashlane_admission_waits_total",
                    "flashlane_streams_finished_total", "flashlane_streams_failed_total",
                    "flashlane_generated_tokens_total"):
            metrics[name.removeprefix("flashlane_")] = float(line.split(" ")[1])
    done.set()
    rss_end = server.rss()
    exit_status = server.stop()

    figures = {
        "clients": args.clients, "seconds": args.seconds, "seed": args.seed,
        "requests": sum(kinds.values()), "by_kind": dict(sorted(kinds.items())),
        "by_status": dict(sorted(statuses.items())),
        "problems": len(problems), "first_problems": problems[:10],
        "health": health, "leaked_sessions": len(busy), "queue_depth": slots.get("queue_depth"),
        "paused_streams": slots.get("paused_streams"), "engine": metrics,
        "rss_start_mib": rss_start >> 20, "rss_peak_mib": rss_peak[0] >> 20, "rss_end_mib": rss_end >> 20,
        "rss_bound_mib": int(rss_start * RSS_FACTOR + RSS_SLACK) >> 20,
        "server_exit": exit_status,
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    ok = (not problems and health == 200 and not busy and slots.get("queue_depth") == 0
          and rss_end <= rss_start * RSS_FACTOR + RSS_SLACK and exit_status == 0)
    print("soak: ok" if ok else "soak: FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""A chat that resends its history: TURNS turns, each the whole conversation so far plus a new
question, streamed; time to first token per turn and the total, against a running server.

    python3 bench/chat_turns.py --url http://127.0.0.1:8080 --turns 20 [--json OUT]

Needs only the Python standard library (tooling, not the serving path)."""

import argparse
import json
import time
import urllib.request


def turn(url, messages, max_tokens):
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    started = time.perf_counter()
    first = None
    text = []
    with urllib.request.urlopen(request) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            piece = delta.get("content") or ""
            if piece and first is None:
                first = time.perf_counter() - started
            text.append(piece)
    return first if first is not None else time.perf_counter() - started, time.perf_counter() - started, "".join(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--system-words", type=int, default=300, help="words of the system prompt")
    parser.add_argument("--json")
    args = parser.parse_args()
    system = "You count numbers for the user. " + " ".join(f"note{i % 53}" for i in range(args.system_words))
    messages = [{"role": "system", "content": system}]
    ttfts, started = [], time.perf_counter()
    for t in range(args.turns):
        messages.append({"role": "user", "content": f"Count from {t + 1} to {t + 12}."})
        ttft, _, reply = turn(args.url, messages, args.max_tokens)
        ttfts.append(ttft)
        messages.append({"role": "assistant", "content": reply})
    total = time.perf_counter() - started
    ordered = sorted(ttfts)
    result = {
        "turns": args.turns,
        "total_s": total,
        "ttft_ms_per_turn": [round(x * 1e3, 1) for x in ttfts],
        "ttft_ms_p50": ordered[len(ordered) // 2] * 1e3,
        "ttft_ms_last": ttfts[-1] * 1e3,
    }
    print(json.dumps(result, indent=1) if args.json is None else "")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"turns {args.turns}: total {total:.2f} s, TTFT p50 {result['ttft_ms_p50']:.0f} ms, last {result['ttft_ms_last']:.0f} ms")


if __name__ == "__main__":
    main()

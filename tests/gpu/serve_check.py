"""`flashlane serve --device cuda` end to end, on a machine with an NVIDIA GPU (not part of CI).

    python3 tests/gpu/serve_check.py FLASHLANE_BINARY

Starts the binary twice on 127.0.0.1 with an ephemeral port, once on the CPU and once with
`--device cuda`, and checks through the OpenAI-compatible HTTP API (stdlib only, so it runs where
the `openai` package is not installed) that:
- the GPU server plans its sessions against GPU memory (start-up names the CUDA device);
- a greedy chat reply (a count, with MTP drafts) is the same text on the GPU as on the CPU;
- eight concurrent greedy requests on the GPU each get their solo reply;
- a sampled request and a logprobs request with prompts longer than one prefill chunk, beside
  greedy ones, all end normally, and the greedy replies are still their solo replies;
- `/metrics` reports accepted drafts.
Exits non-zero with the reason on the first failure."""

import concurrent.futures
import json
import re
import subprocess
import sys
import time
import urllib.request

STARTUP_SECONDS = 120


class Server:
    def __init__(self, binary, *args):
        cmd = [binary, "serve", "--host", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.banner = []
        deadline = time.time() + STARTUP_SECONDS
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit(f"{cmd} exited during start-up:\n" + "".join(self.banner))
            self.banner.append(line)
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                self.url = found.group(1)
                return
        raise SystemExit(f"{cmd} did not start in {STARTUP_SECONDS} s")

    def post(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.load(r)

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            return r.read().decode()

    def chat(self, text, max_tokens, **extra):
        body = {"model": "flashlane-tiny", "messages": [{"role": "user", "content": text}],
                "max_tokens": max_tokens, "temperature": 0, **extra}
        return self.post("/v1/chat/completions", body)["choices"][0]["message"]["content"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def check(ok, message):
    if not ok:
        raise SystemExit("FAILED: " + message)
    print("ok:", message)


def main():
    binary = sys.argv[1]
    prompts = [f"Count from {a} to {a + 40}." for a in (1, 7, 30, 100, 250, 999, 1200, 4000)]
    cpu = Server(binary, "--load-limit-gb", "4")
    try:
        want = [cpu.chat(p, 160) for p in prompts[:2]]
    finally:
        cpu.stop()
    gpu = Server(binary, "--device", "cuda", "--parallel", "8", "--context", "4096")
    try:
        banner = "".join(gpu.banner)
        print(banner)
        check("(CUDA)" in banner, "the GPU server's start-up names the CUDA device")
        got = [gpu.chat(p, 160) for p in prompts[:2]]
        check(got == want, f"greedy replies on the GPU equal the CPU's: {got[0][:60]!r}")
        solo = [gpu.chat(p, 160) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda p: gpu.chat(p, 160), prompts))
        check(together == solo, "eight concurrent greedy replies equal their solo replies")
        # Prompts of over 512 tokens are read in chunks without rows, beside greedy decoding.
        long_text = "Repeat after me: " + " ".join(f"word{i}" for i in range(400))
        asks = [(prompts[0], {}), (long_text, {"temperature": 0.7, "seed": 5}),
                (long_text, {"logprobs": True}), (prompts[1], {})]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            mixed = list(pool.map(lambda a: gpu.chat(a[0], 40 if a[1] else 160, **a[1]), asks))
        check(mixed[0] == solo[0] and mixed[3] == solo[1],
              "greedy replies beside long sampled and logprobs requests equal their solo replies")
        metrics = gpu.get("/metrics")
        accepted = re.search(r"^flashlane_draft_accepted_total (\d+)", metrics, re.M)
        check(accepted and int(accepted.group(1)) > 0, "/metrics counts accepted MTP drafts")
    finally:
        gpu.stop()
    print("all GPU serve checks passed")


if __name__ == "__main__":
    main()

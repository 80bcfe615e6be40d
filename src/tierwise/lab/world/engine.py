"""A real engine for tests and the lab: a tiny random GGUF model behind llama.cpp's server.

:func:`write_tiny_gguf` writes a llama-architecture model with random weights (seeded)
and a minimal SentencePiece-style vocabulary — the control tokens, all 256 ``<0xXX>``
byte tokens (without them a character outside the vocabulary aborts the server),
letters, digits, punctuation and as many two-character pieces as the size asks — with
the ``gguf`` package, in about a second and without downloading anything. Its words
are noise; its timing is a real transformer's: prefill grows with the prompt (and
its square, attention), each decode step reads every weight and the KV cache.

The weights are shaped so that generation never ends early and every token is
printable: one hidden dimension carries a constant from the embeddings (no layer
writes to it), and the output head scores the end-of-sequence, control and byte
tokens far below the others along it. A request asking for ``n`` tokens gets ``n``
tokens, one stream event each.

:func:`llama_server` starts ``python -m llama_cpp.server`` on a free loopback port
(one request at a time, ``--interrupt_requests False`` so that an arriving request
waits instead of cutting the running stream) and waits until it answers.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tierwise.errors import LabError

__all__ = [
    "ENGINE_SIZES",
    "EngineSize",
    "engine_command",
    "engine_unavailable_reason",
    "llama_server",
    "wait_engine_ready",
    "write_tiny_gguf",
]

SERVED_MODEL = "tiny"
_BYTE_BASE = 3  # ids 0-2: <unk>, <s>, </s>; then the 256 byte tokens


@dataclass(frozen=True)
class EngineSize:
    """A random model's shape."""

    width: int = 128
    layers: int = 2
    vocab: int = 600
    context: int = 2048
    heads: int = 4


ENGINE_SIZES = {
    "tiny": EngineSize(),  # 2.7 MB: answers in milliseconds (tests)
    "small": EngineSize(width=512, layers=8, heads=8, context=4096),  # 136 MB: learnable timing
}


def engine_unavailable_reason() -> str | None:
    """Why the real engine cannot run here (llama_cpp's server or gguf missing), or None."""
    import importlib.util

    for module in ("llama_cpp", "gguf", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'llama-cpp-python[server]' gguf)"
    return None


def _vocabulary(size: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types (gguf.TokenType values) of the SPM vocabulary."""
    unknown, control, normal, byte = 2, 3, 1, 6
    tokens = ["<unk>", "<s>", "</s>"]
    types = [unknown, control, control]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [byte] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    singles = ["▁", *letters, *letters.upper(), *"0123456789", *".,;:!?'\"-()"]
    pairs = [f"▁{c}" for c in letters] + [a + b for a in letters for b in letters]
    pieces = (singles + pairs)[: max(size - len(tokens), len(singles))]
    tokens += pieces
    types += [normal] * len(pieces)
    scores = [0.0] * _BYTE_BASE + [-1000.0] * 256 + [-float(len(p) == 1) for p in pieces]
    return tokens, scores, types


def write_tiny_gguf(path: str | Path, size: EngineSize = EngineSize(), seed: int = 0) -> Path:
    """Write a random llama-architecture GGUF model of ``size`` to ``path``; return it."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocabulary(size.vocab)
    n_vocab, d, ff = len(tokens), size.width, 4 * size.width
    path = Path(path)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tierwise-tiny")
    w.add_context_length(size.context)
    w.add_embedding_length(d)
    w.add_block_count(size.layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(size.heads)
    w.add_head_count_kv(size.heads)
    w.add_rope_dimension_count(d // size.heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def rand(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    embed = rand(n_vocab, d, scale=0.5)
    embed[:, 0] = 4.0  # the constant dimension: no layer writes to it (rows 0 below)
    head = rand(n_vocab, d, scale=0.5)
    head[:, 0] = 2.0
    head[: _BYTE_BASE + 256, 0] = -50.0  # never end, never a control or a byte token
    w.add_tensor("token_embd.weight", embed)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("output.weight", head)
    for i in range(size.layers):
        out, down = rand(d, d), rand(d, ff)
        out[0, :] = 0.0
        down[0, :] = 0.0
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(b + "attn_q.weight", rand(d, d))
        w.add_tensor(b + "attn_k.weight", rand(d, d))
        w.add_tensor(b + "attn_v.weight", rand(d, d))
        w.add_tensor(b + "attn_output.weight", out)
        w.add_tensor(b + "ffn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(b + "ffn_gate.weight", rand(ff, d))
        w.add_tensor(b + "ffn_up.weight", rand(ff, d))
        w.add_tensor(b + "ffn_down.weight", down)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_engine_ready(proc: subprocess.Popen[bytes], url: str, timeout_s: float = 60.0) -> None:
    """Wait until the engine at ``url`` answers ``/v1/models``; a :class:`LabError` if it
    exits or does not answer within ``timeout_s``."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise LabError(f"llama.cpp server exited with {proc.returncode}: {err.strip()[-800:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/v1/models", timeout=1.0).status_code == 200:
                return
        time.sleep(0.05)
    raise LabError(f"llama.cpp server at {url} did not start in {timeout_s:g} s")


def engine_command(
    model: str | Path, host: str, port: int, threads: int = 1, context: int | None = None
) -> list[str]:
    """The command that runs llama.cpp's server on ``model`` at ``host``:``port``: one
    request at a time, a new request waiting instead of cutting the running stream."""
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model),
        "--model_alias", SERVED_MODEL, "--host", host, "--port", str(port),
        "--n_threads", str(threads), "--n_threads_batch", str(threads),
        "--interrupt_requests", "False", "--verbose", "False",
    ]  # fmt: skip
    if context is not None:
        cmd += ["--n_ctx", str(context)]
    return cmd


@contextlib.contextmanager
def llama_server(
    model: str | Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    *,
    threads: int = 1,
    context: int | None = None,
    prefix: list[str] | None = None,
    ready_timeout_s: float = 60.0,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """llama.cpp's server on ``model`` at ``host``:``port`` (a free loopback port by
    default); yields its base URL and process, killed at the end. ``prefix`` runs it
    through another command (``ip netns exec NAME`` in the lab)."""
    if (reason := engine_unavailable_reason()) is not None:
        raise LabError(reason)
    port = port or _free_port()
    cmd = [*(prefix or []), *engine_command(model, host, port, threads, context)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url = f"http://{host}:{port}"
    try:
        wait_engine_ready(proc, url, ready_timeout_s)
        yield url, proc
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()

"""Tokenising a corpus ahead of the encoder in worker processes.

:class:`TokenizePool` tokenises chunks of texts in ``num_proc`` worker processes (the same chunks
:func:`drmix.retrieval.encode.encode_texts` length-sorts and encodes), so the tokenizer runs on the
other cores while the model encodes the chunk before. Processes rather than threads: transformers'
tokenizer call converts every id to a Python int under the GIL, which a thread cannot overlap with the
encoding loop. Each worker holds a copy of the model's backend ``tokenizers.Tokenizer`` set up as
transformers sets it for ``tokenizer(texts, truncation=True, max_length=...)``
(:func:`drmix.model.pretokenize.backend_for`), cuts long texts where the cut provably keeps the ids
(:mod:`drmix.model.pretokenize`), and sends back each piece's ids as one flat int32 array and its
lengths (two buffers to pickle, not millions of ints).

Workers are forked on Linux (no model pickling, no interpreter start-up; the tokenizer's own thread pool
is switched off in them, as PyTorch's DataLoader workers do) and spawned elsewhere. The first piece's ids
are checked against the transformers tokenizer in this process; if any differ the pool is not used and
encoding tokenises in process as before.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

PIECE = 512  # texts per task sent to a worker
CHECK = 64  # texts of the first piece checked against the transformers tokenizer

_worker: dict[str, Any] = {}
_START = threading.Lock()


def available_cpus() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def resolve_num_proc(num_proc: int | None) -> int:
    """``None`` or 0 -> every available core; otherwise ``num_proc`` (at least 1)."""
    return available_cpus() if not num_proc else max(1, int(num_proc))


def _init(tokenizer_json: str, truncation_side: str, prompt: str, max_length: int | None, cut: bool) -> None:
    from types import SimpleNamespace

    from tokenizers import Tokenizer

    from drmix.model.pretokenize import backend_for

    shim = SimpleNamespace(backend_tokenizer=Tokenizer.from_str(tokenizer_json), truncation_side=truncation_side)
    _worker.update(backend=backend_for(shim, max_length), prompt=prompt, max_length=max_length, cut=cut)


def _work(texts: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
    from drmix.model.pretokenize import tokenize_ids

    ids, cut = tokenize_ids(_worker["backend"], texts, prompt=_worker["prompt"], max_length=_worker["max_length"],
                            cut=_worker["cut"])
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    return (np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)), lengths, cut


def _split(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    return np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []


class TokenizePool:
    """Token ids of chunks of texts, made ahead in ``num_proc`` worker processes (see the module docstring).

    ``submit(texts)`` starts a chunk and returns a handle; ``result(handle)`` waits for its ids (a list of
    int32 arrays, one per text) or returns ``None`` when the workers' ids failed the check (the caller
    tokenises in process)."""

    def __init__(self, tokenizer: Any, *, prompt: str, max_length: int | None, num_proc: int) -> None:
        from drmix.model.pretokenize import cut_is_safe

        self.tokenizer, self.prompt, self.max_length = tokenizer, prompt, max_length
        self.num_proc = int(num_proc)
        self.cut = bool(max_length) and cut_is_safe(tokenizer)
        self.cut_texts = 0
        self.ok: bool | None = None
        args = (tokenizer.backend_tokenizer.to_str(), getattr(tokenizer, "truncation_side", "right"), prompt,
                max_length, self.cut)
        method = "fork" if sys.platform.startswith("linux") else "spawn"
        with _START:  # one pool starts at a time (encodes on several GPUs run on threads)
            saved = os.environ.get("TOKENIZERS_PARALLELISM")
            os.environ["TOKENIZERS_PARALLELISM"] = "false"  # forked workers must not start the Rust thread pool
            try:
                self.pool = ProcessPoolExecutor(max_workers=self.num_proc, mp_context=mp.get_context(method),
                                                initializer=_init, initargs=args)
                self.pool.submit(int, 0).result()  # starts the workers while the variable is set
            finally:
                if saved is None:
                    os.environ.pop("TOKENIZERS_PARALLELISM", None)
                else:
                    os.environ["TOKENIZERS_PARALLELISM"] = saved

    def submit(self, texts: Sequence[str]) -> tuple[list[str], list[Future]]:
        texts = list(texts)
        return texts, [self.pool.submit(_work, texts[i:i + PIECE]) for i in range(0, len(texts), PIECE)]

    def result(self, handle: tuple[list[str], list[Future]]) -> list[np.ndarray] | None:
        texts, futures = handle
        ids: list[np.ndarray] = []
        for f in futures:
            flat, lengths, cut = f.result()
            self.cut_texts += cut
            ids.extend(_split(flat, lengths))
        if self.ok is None:
            self.ok = self._check(texts[:CHECK], ids[:CHECK])
        return ids if self.ok else None

    def _check(self, texts: list[str], ids: list[np.ndarray]) -> bool:
        kw: dict[str, Any] = {"add_special_tokens": True, "return_attention_mask": False,
                              "return_token_type_ids": False}
        if self.max_length:
            kw.update(truncation=True, max_length=int(self.max_length))
        ref = self.tokenizer([self.prompt + t for t in texts], **kw)["input_ids"]
        same = len(ref) == len(ids) and all(list(map(int, a)) == list(r) for a, r in zip(ids, ref))
        if not same:
            log.warning("the tokenizer's worker processes give other ids than the model's tokenizer; "
                        "tokenising in this process instead")
        return same

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["TokenizePool", "available_cpus", "resolve_num_proc"]

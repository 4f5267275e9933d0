"""The decode workload: real-text token ids, per-request positions near the target context.
Protected (the gates and the scorer must see the same workload for every candidate). Its seed
is the gates' input seed, drawn per judgment (``gates/rules/hidden.py``), not the model's: the state
a model holds is sized by :attr:`Workload.position_bound`, which no seed moves.

Tokenizer (deterministic, no download): the corpus is split into words and single punctuation
marks (``\\w+|[^\\w\\s]``); the ``vocab - 256`` most frequent pieces get ids 0.. by descending
frequency (ties: alphabetical); any other piece is spelled as its UTF-8 bytes with ids
``vocab - 256 + byte``. Frequent words get small ids, as with a real BPE vocabulary, so
routing sees a Zipf-like mix of tokens instead of uniform random ids.

Requests: request ``i`` reads the corpus from its own seeded offset, one token per decode
step; its position (tokens already in context) is ``context - jitter_i`` with a seeded jitter
of at most ``context // 64`` tokens, so requests sit near but not at the same length.

The scorer's timed input sets (:meth:`Workload.timed_inputs`): set ``s`` decodes at positions
``position_i + s`` and request ``i``'s stream with the tokens it decoded in earlier sets
skipped, from its seeded recurrent state scaled by a factor drawn per request and set
(:meth:`Workload.state_scale`). So no (request, token, position, state) comes twice within a
judgment, as in real decode: a cache of one row's outputs keyed on that row's inputs never
hits (issue 35).
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

CORPUS_DIR = Path(__file__).parent / "corpus"
CORPUS_FILES = ("austen-pride-and-prejudice.txt", "doyle-adventures-of-sherlock-holmes.txt")
_PIECE = re.compile(r"\w+|[^\w\s]")


def corpus_hash() -> str:
    h = hashlib.sha256()
    for name in CORPUS_FILES:
        h.update(name.encode())
        h.update((CORPUS_DIR / name).read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=4)
def tokens(vocab: int) -> tuple[int, ...]:
    text = "\n".join((CORPUS_DIR / n).read_text(encoding="utf-8") for n in CORPUS_FILES)
    pieces = _PIECE.findall(text)
    n_words = vocab - 256
    if n_words <= 0:
        raise ValueError(f"workload: vocab must exceed 256 byte tokens, got {vocab}")
    ranked = sorted(Counter(pieces).items(), key=lambda kv: (-kv[1], kv[0]))[:n_words]
    ids = {p: i for i, (p, _) in enumerate(ranked)}
    out: list[int] = []
    for p in pieces:
        if p in ids:
            out.append(ids[p])
        else:
            out.extend(n_words + b for b in p.encode("utf-8"))
    return tuple(out)


def _draw_int(seed: int, *parts, bound: int) -> int:
    digest = hashlib.sha256("/".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "little") % max(1, bound)


@dataclass(frozen=True)
class Workload:
    """``rows`` requests at ``context`` tokens (minus jitter), decoding ``steps`` tokens."""

    vocab: int
    rows: int
    context: int
    steps: int
    seed: int

    @property
    def positions(self) -> list[int]:
        jitter = max(1, self.context // 64)
        return [max(1, self.context - _draw_int(self.seed, "pos", i, bound=jitter))
                for i in range(self.rows)]

    @property
    def max_position(self) -> int:
        return max(self.positions) + self.steps

    @property
    def position_bound(self) -> int:
        """The largest position any seed's workload reaches (``max_position`` never exceeds
        it: positions are ``context - jitter`` with jitter >= 0, at least 1): the capacity a
        model's state needs, the same whatever the input seed."""
        return max(1, self.context) + self.steps

    def step_tokens(self, step: int) -> list[int]:
        toks = tokens(self.vocab)
        return [toks[(_draw_int(self.seed, "offset", i, bound=len(toks)) + step) % len(toks)]
                for i in range(self.rows)]

    def step_inputs(self, step: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids int64, positions int32) of every request at decode step ``step``."""
        tok = torch.tensor(self.step_tokens(step), dtype=torch.int64, device=device)
        pos = torch.tensor([p + step for p in self.positions], dtype=torch.int32, device=device)
        return tok, pos

    def timed_tokens(self) -> list[list[int]]:
        """Per step, per request: request ``i``'s corpus stream from its offset with every token
        it decoded in an earlier step skipped, so a request never decodes one token twice in
        ``steps`` steps. Raises when the corpus has fewer distinct tokens than ``steps``."""
        toks = tokens(self.vocab)
        per_row = []
        for i in range(self.rows):
            at = _draw_int(self.seed, "offset", i, bound=len(toks))
            seen, out = set(), []
            for k in range(len(toks)):
                t = toks[(at + k) % len(toks)]
                if t not in seen:
                    seen.add(t)
                    out.append(t)
                    if len(out) == self.steps:
                        break
            if len(out) < self.steps:
                raise ValueError(f"workload: the corpus holds {len(out)} distinct tokens at vocab "
                                 f"{self.vocab}, fewer than the {self.steps} steps asked for")
            per_row.append(out)
        return [[row[s] for row in per_row] for s in range(self.steps)]

    def state_scale(self, step: int) -> list[float]:
        """Per request: the factor (in [0.75, 1.25)) its seeded recurrent state is scaled by
        before timed input set ``step``, drawn per request and step."""
        return [0.75 + 0.5 * _draw_int(self.seed, "state", step, i, bound=1 << 24) / (1 << 24)
                for i in range(self.rows)]

    def timed_inputs(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every timed input set at once: (token ids ``[steps, rows]`` int64, positions
        ``[steps, rows]`` int32: ``position_i + step``, state scales ``[steps, rows]`` f32)."""
        tok = torch.tensor(self.timed_tokens(), dtype=torch.int64, device=device)
        pos = torch.tensor([[p + s for p in self.positions] for s in range(self.steps)],
                           dtype=torch.int32, device=device)
        scale = torch.tensor([self.state_scale(s) for s in range(self.steps)], dtype=torch.float32,
                             device=device)
        return tok, pos, scale

    def describe(self) -> dict:
        return {"rows": self.rows, "context": self.context, "steps": self.steps, "seed": self.seed,
                "corpus": list(CORPUS_FILES), "corpus_sha256_16": corpus_hash()}

"""Prompts for the load driver: generated ones of a length distribution, or a prompts file.

:func:`parse_length_dist` reads a prompt-length spec (tokens) into a :class:`LengthDist`, whose
draws make prompts of words from :data:`VOCAB` (about one token each); :func:`read_prompts` reads
a prompts file (plain lines, or JSONL with ``prompt`` or ``messages``). docs/capture.md ("Load
driver and request metrics") documents both.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tracekit.errors import LoadInputError

#: Words generated prompts are made of: common English words that BPE tokenizers of the usual
#: LLM families (Llama, Qwen, Mistral, GPT) encode as one token each when preceded by a space,
#: so a prompt of N words is about N tokens (plus the tokenizer's BOS/template tokens).
_VOCAB_TEXT = """the of and to in is was for on that with as by at from his her they this had are not be
    but were which one all their she there been has have when who will more no if out so said what
    up its about into than them can only other new some could time these two may then do first any
    my now such like our over man me even most made after also did many before must through back
    years where much your way well down should because each just those people how too little state
    good very make world still own see men work long get here between both life being under never
    day same another know while last might us great old year off come since against go came right
    used take three small large next early young important few public bad able high old best sure
    house water room light story point fact group place hand part case week company system program
    question number night area money study book eye job word business issue side kind head far
    black long white line end city force car field deal game form music war level"""
VOCAB: tuple[str, ...] = tuple(dict.fromkeys(_VOCAB_TEXT.split()))

#: Most prompt tokens a length distribution may draw.
MAX_PROMPT_TOKENS = 1_000_000


@dataclass(frozen=True)
class LengthDist:
    """A prompt-length distribution in tokens; see :func:`parse_length_dist`."""

    kind: Literal["fixed", "uniform", "normal", "lognormal"]
    a: float
    b: float = 0.0

    def sample(self, rng: random.Random) -> int:
        """One length (tokens, ≥ 1, ≤ :data:`MAX_PROMPT_TOKENS`)."""
        if self.kind == "fixed":
            x = self.a
        elif self.kind == "uniform":
            x = rng.randint(int(self.a), int(self.b))
        elif self.kind == "normal":
            x = rng.gauss(self.a, self.b)
        else:
            x = self.a * math.exp(self.b * rng.gauss(0.0, 1.0))
        return max(1, min(MAX_PROMPT_TOKENS, round(x)))


_DIST_HELP = ("expected fixed:N, uniform:LOW:HIGH, normal:MEAN:STDDEV or lognormal:MEDIAN:SIGMA "
              "(tokens; N, LOW, HIGH, MEAN, MEDIAN ≥ 1)")


def parse_length_dist(spec: str) -> LengthDist:
    """Parse a prompt-length spec (tokens).

    ``N`` or ``fixed:N``: every prompt N tokens. ``uniform:LOW:HIGH``: integers LOW..HIGH
    inclusive, equally likely. ``normal:MEAN:STDDEV``: Gaussian, rounded. ``lognormal:MEDIAN:SIGMA``:
    ``MEDIAN·exp(SIGMA·Z)``, Z standard normal, rounded (SIGMA is the standard deviation of the
    log-length; 0.5 gives p95/p50 ≈ 2.3). Draws are clamped to 1..:data:`MAX_PROMPT_TOKENS`.
    Raises :class:`LoadInputError` naming the spec.
    """
    parts = spec.strip().split(":")
    try:
        nums = [float(p) for p in parts[1:]] if len(parts) > 1 else [float(parts[0])]
    except ValueError:
        raise LoadInputError(spec, f"bad length distribution: {_DIST_HELP}") from None
    kind = parts[0].lower() if len(parts) > 1 else "fixed"
    arity = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2}
    if kind not in arity or len(nums) != arity[kind] or not all(math.isfinite(x) for x in nums):
        raise LoadInputError(spec, f"bad length distribution: {_DIST_HELP}")
    a = nums[0]
    b = nums[1] if len(nums) > 1 else 0.0
    if a < 1 or (kind == "uniform" and (b < a or a != int(a) or b != int(b))) or (
        kind in ("normal", "lognormal") and b < 0
    ) or (kind == "fixed" and a != int(a)):
        raise LoadInputError(spec, f"bad length distribution: {_DIST_HELP}")
    return LengthDist(kind, a, b)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Prompt:
    """One request's input: ``text`` (completions) or ``messages`` (chat), with its own
    ``max_tokens`` (None: the spec's) and ``est_tokens``, its whitespace-separated word count."""

    text: str | None
    messages: tuple[Mapping[str, Any], ...] | None
    max_tokens: int | None
    est_tokens: int


def _prompt(text: str | None, messages: Sequence[Mapping[str, Any]] | None, max_tokens: int | None) -> Prompt:
    words = (text or "").split() if messages is None else [
        w for m in messages for w in str(m.get("content") or "").split()
    ]
    return Prompt(text, tuple(messages) if messages is not None else None, max_tokens, len(words))


def read_prompts(path: str | Path) -> list[Prompt]:
    """Prompts of a file: JSONL (a ``.jsonl`` name, or a first non-blank line starting with ``{``)
    with ``prompt`` (string) or ``messages`` (list of ``{"role", "content"}``) and optional
    ``max_tokens`` (positive integer) per line; otherwise one prompt per non-blank line.
    Raises :class:`LoadInputError` naming the file (and the line) on anything else."""
    src = Path(path)
    try:
        text = src.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise LoadInputError(src, f"cannot read prompts file: {reason}") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise LoadInputError(src, "no prompts in the file")
    if not (src.suffix.lower() == ".jsonl" or lines[0][1].lstrip().startswith("{")):
        return [_prompt(line.strip(), None, None) for _, line in lines]
    out: list[Prompt] = []
    for n, line in lines:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadInputError(src, f"line {n}: not JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise LoadInputError(src, f"line {n}: expected a JSON object with 'prompt' or 'messages'")
        prompt, messages, max_tokens = obj.get("prompt"), obj.get("messages"), obj.get("max_tokens")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 1):
            raise LoadInputError(src, f"line {n}: max_tokens must be a positive integer, got {max_tokens!r}")
        if isinstance(prompt, str):
            out.append(_prompt(prompt, None, max_tokens))
        elif isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            out.append(_prompt(None, messages, max_tokens))
        else:
            raise LoadInputError(
                src, f"line {n}: expected 'prompt' (a string) or 'messages' (a non-empty list of "
                "{\"role\": ..., \"content\": ...} objects with string values)"
            )
    return out


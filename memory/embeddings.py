"""``HashingEmbeddings``: a small deterministic ``Embeddings`` for tests and the offline demo.

The scripted chat model's twin for vectors: no weights, no network, the same
vector for the same text in every process. Words (lower-cased, alphanumeric)
and word bigrams are hashed into ``dims`` buckets with a sign, then the vector
is L2-normalised, so texts that share words have a high cosine similarity. It
is good enough to make semantic recall observable, not a language model.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re

from langchain_core.embeddings import Embeddings

__all__ = ["HashingEmbeddings"]

_WORD = re.compile(r"[a-z0-9]+")


class HashingEmbeddings(Embeddings):
    """Feature-hashing embeddings of ``dims`` floats."""

    def __init__(self, dims: int = 256) -> None:
        if dims < 8:
            raise ValueError("dims must be at least 8")
        self.dims = dims

    def _embed(self, text: str) -> list[float]:
        words = _WORD.findall(text.lower())
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        vector = [0.0] * self.dims
        for feature in features:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dims
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector] if norm else vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)

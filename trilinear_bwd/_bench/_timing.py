"""How the call tables time: batches that span a round, contenders interleaved, rounds rotated."""

import time

import numpy as np

# Time per round, per contender: enough calls to span this many seconds.
ROUND_SECONDS = 0.02


def _batch(fn):
    """How many calls of ``fn`` span ``ROUND_SECONDS`` (after a warm-up call)."""
    fn()
    start = time.perf_counter()
    fn()
    return max(1, int(ROUND_SECONDS / max(time.perf_counter() - start, 1e-7)))


def _interleaved(contenders, rounds):
    """``{name: median seconds per call}``, the contenders run in turn in every round."""
    return {name: float(np.median(s)) for name, s in _samples(contenders, rounds).items()}


def _samples(contenders, rounds):
    """``{name: [seconds per call, one per round]}``, the contenders in turn every round."""
    batches = {name: _batch(fn) for name, fn in contenders.items()}
    samples = {name: [] for name in contenders}
    for r in range(rounds):
        names = list(contenders)
        names = names[r % len(names):] + names[:r % len(names)]   # rotate the order
        for name in names:
            fn, batch = contenders[name], batches[name]
            start = time.perf_counter()
            for _ in range(batch):
                fn()
            samples[name].append((time.perf_counter() - start) / batch)
    return samples

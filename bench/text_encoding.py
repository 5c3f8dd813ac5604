"""How long tokenizing the shipped text data set takes: the vocabulary built and every review encoded.

Run: .venv/bin/python bench/text_encoding.py [ROUNDS]     Target: under 1 s on 2 cores (the fastest of 3 rounds).

Every trial of the text classifier pays this once, in its own process, before its first step; the figure was an
assertion in tests/test_data_text.py until the tests stopped asserting on wall-clock time.
"""

from __future__ import annotations

import statistics
import sys
import time

from bakeoff.data.text import encode_dataset, load_text_dataset


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    data = load_text_dataset({})
    timings = []
    for _ in range(rounds):
        start = time.perf_counter()
        encode_dataset(data, vocab_size=8000, seq_len=128)
        timings.append(time.perf_counter() - start)
    best = min(timings)
    sys.stdout.write(f"text encoding (shipped reviews, vocab 8000, seq_len 128): min {best:.3f} s, median "
                     f"{statistics.median(timings):.3f} s, max {max(timings):.3f} s over {rounds} rounds "
                     f"(target < 1 s: {'met' if best < 1.0 else 'MISSED'})\n")


if __name__ == "__main__":
    main()

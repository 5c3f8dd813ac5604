"""How long the embedded speech corpus takes to generate (eSpeak NG, all cores) and to load once cached.

Run: .venv/bin/python bench/speech_corpus.py        Target: generation under 2 minutes on 2 cores.

Generates into a fresh temporary cache (``BAKEOFF_SPEECH_CACHE``), so the figure is the first-use cost a user
pays, then loads the same corpus again from that cache.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        os.environ["BAKEOFF_SPEECH_CACHE"] = cache
        from bakeoff.data.speech import embedded_corpus

        start = time.perf_counter()
        data = embedded_corpus()
        generate = time.perf_counter() - start
        start = time.perf_counter()
        embedded_corpus()
        cached = time.perf_counter() - start
        size = sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache))
    n = len(data.train.texts) + len(data.test.texts)
    sys.stdout.write(f"speech corpus: {n} utterances generated in {generate:.1f} s on {os.cpu_count()} cores "
                     f"(target < 120 s: {'met' if generate < 120 else 'MISSED'}); loaded from the cache in "
                     f"{cached:.2f} s; cache file {size / 2**20:.1f} MiB\n")


if __name__ == "__main__":
    main()

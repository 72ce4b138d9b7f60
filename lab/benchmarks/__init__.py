"""Research benchmarks of fastcrag: latency, speed levers and their replay, stores, embedder, reliability."""

"""Evaluation and benchmarks: SQuAD v2 abstention, BEIR retrieval, stage latency, grader cost."""

"""Grading: the reranker/grader interface and its runtimes (ONNX), the reader head's spans, calibration."""

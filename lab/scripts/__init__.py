"""One-off measurement scripts of the lab (`python -m lab.scripts.NAME`), figures in lab/RESULTS.md."""

"""The lab beside the fastcrag package: from-scratch training, distillation, data building and benchmarks.

Not installed (`pip install` takes `src/` only): run it from the repository root as `python -m lab COMMAND`. The lab
imports the package freely; the package never imports the lab.
"""

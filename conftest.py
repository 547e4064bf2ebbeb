"""Project-wide pytest settings: notebooks run on a reduced case count."""

import os

os.environ.setdefault("LLMOPT_NOTEBOOK_CASES", "3")
os.environ.setdefault("MPLBACKEND", "Agg")

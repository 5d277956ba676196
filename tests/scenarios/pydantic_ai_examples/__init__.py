"""pydantic-ai's own examples, copied byte for byte from the ``pydantic-ai-examples`` 2.62.0 wheel.

Why copies and not the package: the newest ``pydantic-ai-examples`` on PyPI (2.62.0) pins
``pydantic-ai-slim==2.62.0`` and brings about 140 packages (gradio, modal, datasets, pyarrow, ...),
so installing it would move the whole suite off the pydantic-ai it is tested on. The files are the
released ones, unchanged: ``RECORD`` below is the wheel's own hash line for each, and
``tests/test_pydantic_examples.py`` checks every file against it. The MIT licence is in ``LICENSE``.
"""

#: The wheel's RECORD lines (urlsafe base64 sha256, no padding, and size) for the copied files.
RECORD = {
    "bank_support.py": ("XfpHTN-MzjpAxRreO7PE2jOfRbpxZ_c6aMZZr-6Nmc8", 3014),
    "roulette_wheel.py": ("8a8LYLD9Gga6XlOCwN99eYNVMKblACmcv24KQ8AFH_M", 1728),
    "weather_agent.py": ("xdg6lcY7RwDTxZY1sFL68eM0O4X_jKMTZSQy64Xbxz8", 3260),
    "flight_booking.py": ("M7GubhVVyJGRGnGKl_xGZ8MMj9xWiLav4vYUThKda5A", 7559),
    "sql_gen.py": ("6bJueVG15a7k7_gpQQf5LMJXDiE5OJ8zpKe3RdJXHKo", 5252),
}
VERSION = "2.62.0"

"""pydantic-ai's own examples, copied byte for byte from the ``pydantic-ai-examples`` 2.62.0 wheel.

Why copies and not the package: the newest ``pydantic-ai-examples`` on PyPI (2.62.0) pins
``pydantic-ai-slim==2.62.0`` and brings about 140 packages (gradio, modal, datasets, pyarrow, ...),
so installing it would move the whole suite off the pydantic-ai it is tested on. The files are the
released ones, unchanged: ``RECORD`` below is the wheel's own hash line for each, and
``tests/processes/test_pydantic_examples.py`` checks every file against it. The MIT licence is in ``LICENSE``.
"""

#: The wheel's RECORD lines (urlsafe base64 sha256, no padding, and size) for the copied files.
RECORD = {
    "bank_support.py": ("XfpHTN-MzjpAxRreO7PE2jOfRbpxZ_c6aMZZr-6Nmc8", 3014),
    "roulette_wheel.py": ("8a8LYLD9Gga6XlOCwN99eYNVMKblACmcv24KQ8AFH_M", 1728),
    "weather_agent.py": ("xdg6lcY7RwDTxZY1sFL68eM0O4X_jKMTZSQy64Xbxz8", 3260),
    "flight_booking.py": ("M7GubhVVyJGRGnGKl_xGZ8MMj9xWiLav4vYUThKda5A", 7559),
    "sql_gen.py": ("6bJueVG15a7k7_gpQQf5LMJXDiE5OJ8zpKe3RdJXHKo", 5252),
    "chat_app.py": ("BBjfQagRHFtjXL-Ybyxv9t8PCCQH5lLYoHgDrxgfZj4", 7164),
    "medical_agent_delegation.py": ("8RYO60iMSgs5UhlG8z0w10hKA7tjCLq4Qxmb8Tc-77o", 10769),
    "pydantic_model.py": ("gcmIOsBBspVZX951XvU3Txq2jOWxZwcZ5H6aKLpqjTs", 845),
    "stream_markdown.py": ("UsidJ5N8TSvty4rLKZJYpPc25sP_Y8nwnYqwhxsQ4QY", 2522),
    "stream_whales.py": ("tmk2rNiE3p5Ojs3voFDCANX4WID-xealfxQNUo8laL8", 2784),
}

#: Every example of the wheel, and why one is not run here: each needs what a test cannot have.
NOT_RUN = {
    "rag.py": "embeds with OpenAI's API and reads its documents from GitHub",
    "data_analyst.py": "downloads a dataset from the Hugging Face hub",
    "weather_agent_gradio.py": "a Gradio UI over weather_agent (run here as weather_agent)",
    "cancel_and_resume.py": "an interactive terminal chat (prompt_toolkit) that cancels its own runs from the keyboard",
    "realtime_handoff.py": "a realtime voice session with OpenAI's servers",
    "realtime_text_to_audio.py": "a realtime voice session with OpenAI's servers",
    "realtime_voice.py": "a realtime voice session with OpenAI's servers",
    "twelvelabs_video_agent.py": "TwelveLabs' video API",
    "__main__.py": "a command that copies the examples' files",
}
#: Packages of the wheel that are apps around an agent, each needing its own services.
NOT_RUN_PACKAGES = {
    "ag_ui": "AG-UI servers (the ag-ui protocol package, a browser client)",
    "evals": "pydantic-evals datasets and a model judge",
    "realtime_camera": "a camera and OpenAI's realtime API",
    "realtime_webrtc": "WebRTC and OpenAI's realtime API",
    "slack_lead_qualifier": "Slack and Modal",
}
VERSION = "2.62.0"

#: The wheel's top level, as its RECORD lists it (every ``.py`` is either run or in ``NOT_RUN``).
WHEEL_TOP_LEVEL = (
    "__main__.py", "ag_ui", "bank_support.py", "cancel_and_resume.py", "chat_app.html", "chat_app.py", "chat_app.ts",
    "data_analyst.py", "evals", "flight_booking.py", "medical_agent_delegation.py", "py.typed", "pydantic_model.py",
    "rag.py", "realtime_camera", "realtime_handoff.py", "realtime_text_to_audio.py", "realtime_voice.py",
    "realtime_webrtc", "roulette_wheel.py", "slack_lead_qualifier", "sql_gen.py", "stream_markdown.py",
    "stream_whales.py", "twelvelabs_video_agent.py", "weather_agent.py", "weather_agent_gradio.py",
)

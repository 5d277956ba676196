"""The HTTP service that ``dbos start`` runs: a FastAPI app over one launched ``hx.Runtime``.

Import ``helix_dbos.service.app.create_app`` (or run ``python -m helix_dbos.service``). This package
imports nothing eagerly; the app loader the CLI shares is ``helix_dbos/loader.py``.
"""

"""Public: the HTTP service that ``dbos start`` runs: a FastAPI app over one launched ``hx.Runtime``.

Its surface (docs/service.md): ``python -m helix_dbos.service``, ``helix_dbos.service.app.create_app``
and ``helix_dbos.service.auth.Principal``; its other modules are internal. This package
imports nothing eagerly; the app loader the CLI shares is ``helix_dbos/loader.py``.
"""

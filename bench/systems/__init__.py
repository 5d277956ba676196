"""One runner module per system the bench measures: ``bare`` (the floor: a hand-written loop on
plain DBOS steps), ``pydantic_ai`` (Pydantic AI's ``DBOSDurability``) and ``helix`` (helix_dbos).
Each offers ``make_runner(spec)``: one call of the runner is one agent run, returning its answer."""

"""Pydantic AI's own DBOS integration on the same workload: ``Agent(..., capabilities=[DBOSDurability()])``.

The same model script and tool bodies, with each tool wrapped in ``@DBOS.step`` (pydantic-ai does
not make plain function tools durable; its docs prescribe the wrapper), run by ``agent.run()``
inside a workflow of our own. Build it like ``bench.systems.bare`` (after ``configure_dbos``,
before ``DBOS.launch()``): the capability registers its model step when bound to the agent.
"""

from __future__ import annotations

from dbos import DBOS
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability

from bench.systems.bare import as_dbos_step
from bench.workload import TOOL_FUNCTIONS, Runner, WorkloadSpec, make_model

PAI_AGENT_NAME = "bench_pai"
"""Becomes the DBOS step-name prefix (`bench_pai__model.request`): must be stable."""


def make_runner(spec: WorkloadSpec) -> Runner:
    """Same script and bodies through `DBOSDurability` (build after `configure_dbos(..., launch=False)`).

    The capability registers its model-request step when bound to the agent (at `Agent(...)`), which is
    why the agent is built here, against the current DBOS registry. Function tools are *not* wrapped by
    pydantic-ai; wrapping each in `@DBOS.step` is what its docs prescribe for durable tools.
    """
    tools = [as_dbos_step(fn, f"bench.pai.tool.{name}") for name, fn in TOOL_FUNCTIONS.items()]
    agent = Agent(make_model(spec), name=PAI_AGENT_NAME, tools=tools, capabilities=[DBOSDurability()])

    @DBOS.workflow(name="bench.pai.agent_run")
    async def pai_agent_run(prompt: str) -> str:
        result = await agent.run(prompt)
        return result.output

    async def run() -> str:
        return await pai_agent_run(spec.prompt)

    run.workflow = pai_agent_run  # type: ignore[attr-defined]
    run.workflow_name = "bench.pai.agent_run"  # type: ignore[attr-defined]
    return run


PEER_AGENT_NAME = "bench_peer"
PEER_WORKFLOW = f"{PEER_AGENT_NAME}.run"
"""The workflow ``DBOSAgent`` registers for ``run`` (``f"{name}.run"``): what a front end enqueues."""


def make_peer_agent(spec: WorkloadSpec) -> object:
    """Pydantic AI's own DBOS agent (``DBOSAgent``) of the same model script and tool bodies.

    What a user picks instead of helix to run agents on DBOS queues: the wrapper registers
    ``bench_peer.run`` (the agent's ``run`` as a DBOS workflow, its model requests as steps), a
    front end enqueues that workflow by name with ``DBOSClient`` (``deps=None``: the workflow's
    ``deps`` is keyword-only and required), and workers serve the queue. Function tools are wrapped
    in ``@DBOS.step`` as its docs prescribe (the wrapper makes only model requests and MCP calls
    durable). Build after ``configure_dbos(..., launch=False)``, before ``DBOS.launch()``.
    """
    import warnings

    from pydantic_ai.durable_exec.dbos import DBOSAgent

    tools = [as_dbos_step(fn, f"bench.peer.tool.{name}") for name, fn in TOOL_FUNCTIONS.items()]
    agent = Agent(make_model(spec), name=PEER_AGENT_NAME, tools=tools)
    with warnings.catch_warnings():  # deprecated in favour of DBOSDurability, still what a queue-served agent enqueues by name
        warnings.simplefilter("ignore", DeprecationWarning)
        return DBOSAgent(agent, name=PEER_AGENT_NAME)

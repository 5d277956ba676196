"""Sessions of a rate-limited agent whose model is pydantic-ai's real ``OpenAIChatModel`` over HTTP.

    python -m tests.scenarios.rate_app --db URL --url PROVIDER_URL --executor ID --sessions N --limit N --period S

Several of these run at once on one database against one provider (``tests/support/
provider_server.py``), which logs every request as it arrives: the rate is judged at the model's
clock. Each session is one model request (a text reply). Prints a JSON line with the statuses.
"""

from __future__ import annotations

import argparse
import json

from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import helix_dbos as hx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--executor", required=True)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--limit", type=int, required=True)
    parser.add_argument("--period", type=float, required=True)
    args = parser.parse_args()
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(api_key="test-key", base_url=args.url))
    agent = hx.Agent(name="rated", model=model, instructions="Be brief.")
    limits = {"rated": hx.AgentLimits(model_requests=(args.limit, args.period))}
    with hx.Runtime([agent], database_url=args.db, executor_id=args.executor, limits=limits) as runtime:
        handles = [runtime.start("rated", f"hello {i}") for i in range(args.sessions)]
        statuses = [h.result(timeout=240).status for h in handles]
    print(json.dumps({"statuses": statuses}), flush=True)


if __name__ == "__main__":
    main()

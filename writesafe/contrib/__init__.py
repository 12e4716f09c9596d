"""Integrations with the frameworks around a guarded write, each in its own module and extra.

`writesafe.contrib.fastapi`, `.flask` and `.django` guard HTTP endpoints by their
`Idempotency-Key` header; `.celery` makes a task's effect at most once per task id; `.mcp` serves
a tool to agents. They sit on the entry floor: each imports the guard below it, and nothing in
the core imports them. Importing one without its extra says which extra to install.
"""

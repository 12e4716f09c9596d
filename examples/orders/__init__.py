"""The recorded order submission (../shared/scenarios/order_submission.yaml), via the public API.

`backends.py` holds two versions of a fake order service that speak the recorded wire formats,
`adapters.py` the three adapter versions, and `scenario.py` runs each case against a
backend/adapter pair. The release check, from the repository root:

    writesafe contract check ../shared/scenarios/order_submission.yaml \
        examples.orders.scenario:runner
"""

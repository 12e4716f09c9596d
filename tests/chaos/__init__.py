"""Proof under faults: a misbehaving shop, agent workers, a fault driver, an invariant checker.

    python -m tests.chaos --orders 500 --workers 4 --seed 7

See `docs/reliability.md` for what is injected, what is checked and a recorded large run.
"""

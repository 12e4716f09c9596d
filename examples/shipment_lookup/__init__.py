"""The recorded shipment lookup (../shared/scenarios/shipment_lookup.yaml), via the public API.

`dependency.py` is the scripted delivery-status service, `adapter.py` maps its codes onto the
contract, and `scenario.py` runs each recorded case as a client would and reports what happened.
Check it from the repository root:

    writesafe contract check ../shared/scenarios/shipment_lookup.yaml \
        examples.shipment_lookup.scenario:runner
"""
